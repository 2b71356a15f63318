"""An agent with `NativeOutput`: the requests that continue its conversation for a compaction (fork, summary
sent in the conversation, Native's emulation) do not carry its structured-output format, which on OpenAI would
force every compaction reply into the agent's output schema."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput, ToolOutput, models
from pydantic_ai.messages import CompactionPart

from pydantic_ai_compaction import CompactionEvent, Fork, Native, StatelessSummary, Trigger

from .wire.providers import PROVIDERS, Call, Mock, Say
from .wire.script import Script, plain_tools

TRIGGER = Trigger(tokens=2_500)


class Report(BaseModel):
    verdict: str


class StrictScript(Script):
    """The scripted model, bound as OpenAI's strict structured output binds a real one: a request with a
    `json_schema` format is answered with an object of that schema, whatever it asked."""

    def __call__(self, text: str, body: str = '') -> Say:
        say = super().__call__(text, body)
        if say.text is not None and '"json_schema"' in body:
            return Say(text=json.dumps({'verdict': 'done'}))
        return say


@pytest.fixture(autouse=True)
def allow_model_requests() -> Iterator[None]:
    with models.override_allow_model_requests(True):
        yield


STRATEGIES: dict[str, Callable[[Callable[[CompactionEvent], None]], Any]] = {
    'fork-json': lambda o: Fork(trigger=TRIGGER, observer=o),
    'fork-free': lambda o: Fork(trigger=TRIGGER, variant='free', observer=o),
    'summary-sent': lambda o: StatelessSummary(trigger=TRIGGER, request='sent', observer=o),
    'native': lambda o: Native(trigger=TRIGGER, observer=o),
}


@pytest.mark.parametrize('provider', ['openai-chat', 'openai-responses'])
@pytest.mark.parametrize('strategy', list(STRATEGIES))
def test_compaction_requests_leave_out_the_agents_native_output(strategy: str, provider: str) -> None:
    events: list[CompactionEvent] = []
    mock = Mock(PROVIDERS[provider](), StrictScript())
    agent = Agent(
        mock.model(),
        output_type=NativeOutput(Report),
        capabilities=[STRATEGIES[strategy](events.append)],
        system_prompt='You audit logs.',
    )
    plain_tools(agent)

    result = agent.run_sync('Audit logs 1-8 and report.')
    assert result.output == Report(verdict='done')
    assert mock.problems() == []
    records = [e.record for e in events if e.kind == 'compacted' and e.record is not None]
    assert len(records) >= 2
    # Each compaction read the compactor's own reply, not an object of the agent's output schema.
    assert [r.fallback_reason for r in records] == [None] * len(records)
    summaries = [p.content or '' for m in result.all_messages() for p in m.parts if isinstance(p, CompactionPart)]
    assert summaries and not any('verdict' in summary for summary in summaries)


class JSONReport(Script):
    """The scripted model, ending each turn with the agent's output as JSON text."""

    def __call__(self, text: str, body: str = '') -> Say:
        say = super().__call__(text, body)
        return Say(text=json.dumps({'verdict': 'done'})) if say.text == 'report: done' else say


def _marked(payload: dict[str, Any]) -> bool:
    return '[pydantic-ai-compaction' in json.dumps(payload)


@pytest.mark.parametrize('provider', ['openai-chat', 'openai-responses'])
@pytest.mark.parametrize('output', ['prompted', 'auto-native'])
def test_compaction_requests_carry_no_output_schema_whatever_the_output_mode(output: str, provider: str) -> None:
    """`PromptedOutput` (JSON mode and an instruction to answer with the schema) and a plain output type that the
    model makes native by itself (its profile's default) are left out of a fork's request as `NativeOutput` is;
    the agent's own requests keep it."""
    from pydantic_ai import PromptedOutput

    mock = Mock(PROVIDERS[provider](), JSONReport())
    model = mock.model()
    if output == 'auto-native':
        model = mock.model(profile={**model.profile, 'default_structured_output_mode': 'native'})
    output_type: Any = PromptedOutput(Report) if output == 'prompted' else Report
    events: list[CompactionEvent] = []
    agent = Agent(model, output_type=output_type, capabilities=[Fork(trigger=TRIGGER, observer=events.append)])
    plain_tools(agent)
    assert agent.run_sync('Audit logs 1-8 and report.').output == Report(verdict='done')
    forks = [p for p in mock.payloads if _marked(p)]
    agents = [p for p in mock.payloads if not _marked(p)]
    assert forks and [e.kind for e in events].count('compacted') == len(forks)
    schema = 'verdict'
    # The agent's own requests carry the schema (the check below could not fail otherwise) ...
    assert all(schema in json.dumps(p) for p in agents)
    for payload in forks:
        text = json.dumps(payload)
        # ... no fork request does: no response format, no instruction to answer with the schema.
        assert schema not in text and 'json_object' not in text and 'json_schema' not in text


@pytest.mark.parametrize('emulate', [True, False])
def test_a_provider_without_a_compaction_endpoint_is_a_model_without_provider_compaction(emulate: bool) -> None:
    """A compatible server that answers the agent's requests but not `/responses/compact` (404): `Native` emulates
    (or says `unsupported`), as for a model without provider compaction; it is not a setup mistake, so warnings
    made errors do not end the run."""
    events: list[CompactionEvent] = []
    mock = Mock(
        PROVIDERS['openai-responses'](), Script(), fail=lambda path, payload: 404 if path.endswith('/compact') else None
    )
    agent = Agent(mock.model(), capabilities=[Native(trigger=TRIGGER, emulate=emulate, observer=events.append)])
    plain_tools(agent)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert agent.run_sync('Audit logs 1-8 and report.').output == 'report: done'
    assert ('/v1/responses/compact', 404) in {(e.path, e.status) for e in mock.exchanges}
    records = [e.record for e in events if e.record is not None]
    assert records
    if emulate:
        assert all(r.variant == 'emulated' and r.fallback_reason is None for r in records)
    else:
        assert all(r.fallback_reason == 'unsupported' for r in records)


class ReportByTool(Script):
    """The scripted model, ending each turn by calling the agent's output tool."""

    def __call__(self, text: str, body: str = '') -> Say:
        say = super().__call__(text, body)
        return Say(calls=(Call('final_result', {'verdict': 'done'}),)) if say.text == 'report: done' else say


def _tool_names(payload: dict[str, Any]) -> list[str]:
    """The names of the tools a request defines, in any of the four providers' formats."""
    names: list[str] = []
    for tool in payload.get('tools') or []:
        if not isinstance(tool, dict):
            continue
        declarations = tool.get('functionDeclarations') or tool.get('function_declarations')  # pyright: ignore[reportUnknownMemberType]
        if declarations:
            names += [d['name'] for d in declarations]  # pyright: ignore[reportUnknownVariableType]
        elif 'function' in tool:
            names.append(tool['function']['name'])  # pyright: ignore[reportUnknownArgumentType]
        elif 'name' in tool:
            names.append(tool['name'])  # pyright: ignore[reportUnknownArgumentType]
    return sorted(names)


def _choice(payload: dict[str, Any]) -> Any:
    return payload.get('tool_choice', payload.get('toolConfig', payload.get('tool_config')))


@pytest.mark.parametrize('provider', ['openai-chat', 'openai-responses', 'anthropic', 'google'])
@pytest.mark.parametrize('output', ['text', 'tool-output'])
def test_a_fork_request_defines_the_agents_tools_on_every_provider(output: str, provider: str) -> None:
    """The fork's cached prefix starts with the tool definitions. Asked for text with `tool_choice='none'`,
    Anthropic and Gemini were sent only the output tool (pydantic-ai restricts a choice there by leaving the
    other tools out), and Anthropic's cache is also invalidated by a changed `tool_choice`: there the agent's
    own choice is kept where it allows text."""
    mock = Mock(PROVIDERS[provider](), ReportByTool() if output == 'tool-output' else Script())
    events: list[CompactionEvent] = []
    output_type: Any = ToolOutput(Report) if output == 'tool-output' else str
    agent = Agent(mock.model(), output_type=output_type, capabilities=[Fork(trigger=TRIGGER, observer=events.append)])
    plain_tools(agent)
    with warnings.catch_warnings():
        warnings.simplefilter('error', RuntimeWarning)
        agent.run_sync('Audit logs 1-8 and report.')
    assert mock.problems() == []
    forks = [p for p in mock.payloads if _marked(p)]
    agents = [p for p in mock.payloads if not _marked(p)]
    assert forks and [e.kind for e in events].count('compacted') == len(forks)
    assert all(e.record is None or e.record.fallback_reason is None for e in events)
    tools = _tool_names(agents[0])
    assert 'read_log' in tools and ('final_result' in tools) == (output == 'tool-output')
    assert all(_tool_names(fork) == tools for fork in forks)
    if provider == 'anthropic' and output == 'text':
        # The agent's own request, byte for byte where it matters for the cache: its tool choice too.
        assert all(_choice(fork) == _choice(agents[0]) for fork in forks)


@pytest.mark.parametrize('strategy', ['fork', 'summary-sent'])
def test_the_strategys_own_settings_keep_the_agents_tool_choice_on_anthropic(strategy: str) -> None:
    """`model_settings=` is merged first and the tool choice decided after: it used to be forced to `'none'` again
    whenever a strategy had settings of its own."""
    mock = Mock(PROVIDERS['anthropic'](), Script())
    events: list[CompactionEvent] = []
    settings: Any = {'temperature': 0.0}
    capability = (
        Fork(trigger=TRIGGER, model_settings=settings, observer=events.append)
        if strategy == 'fork'
        else StatelessSummary(trigger=TRIGGER, request='sent', model_settings=settings, observer=events.append)
    )
    agent = Agent(mock.model(), capabilities=[capability])
    plain_tools(agent)
    agent.run_sync('Audit logs 1-8 and report.')
    compactions = [p for p in mock.payloads if _marked(p)]
    agents = [p for p in mock.payloads if not _marked(p)]
    assert compactions and all(e.record is None or e.record.fallback_reason is None for e in events)
    assert all(p.get('temperature') == 0.0 for p in compactions)
    assert all(_choice(p) == _choice(agents[0]) and _tool_names(p) == _tool_names(agents[0]) for p in compactions)


class CallsOutputTool(ReportByTool):
    """The scripted model, answering a fork request by calling the agent's output tool."""

    def __call__(self, text: str, body: str = '') -> Say:
        if '[pydantic-ai-compaction: fork request]' in text:
            return Say(calls=(Call('final_result', {'verdict': 'done'}),))
        return super().__call__(text, body)


def test_a_fork_reply_that_calls_a_tool_says_so() -> None:
    mock = Mock(PROVIDERS['openai-chat'](), CallsOutputTool())
    events: list[CompactionEvent] = []
    agent = Agent(
        mock.model(), output_type=ToolOutput(Report), capabilities=[Fork(trigger=TRIGGER, observer=events.append)]
    )
    plain_tools(agent)
    assert agent.run_sync('Audit logs 1-8 and report.').output == Report(verdict='done')
    records = [e.record for e in events if e.record is not None]
    assert records and all(r.fallback_reason == 'empty' for r in records)
    assert all('the fork called final_result instead of answering in text' in (r.detail or '') for r in records)


def test_behind_a_fallback_model_the_first_models_provider_decides() -> None:
    from pydantic_ai.models.fallback import FallbackModel
    from pydantic_ai.models.test import TestModel

    mock = Mock(PROVIDERS['anthropic'](), ReportByTool())
    events: list[CompactionEvent] = []
    agent = Agent(
        FallbackModel(mock.model(), TestModel()),
        output_type=ToolOutput(Report),
        capabilities=[Fork(trigger=TRIGGER, observer=events.append)],
    )
    plain_tools(agent)
    assert agent.run_sync('Audit logs 1-8 and report.').output == Report(verdict='done')
    forks = [p for p in mock.payloads if _marked(p)]
    agents = [p for p in mock.payloads if not _marked(p)]
    assert forks and all(_tool_names(fork) == _tool_names(agents[0]) for fork in forks)
    assert 'final_result' in _tool_names(agents[0]) and 'read_log' in _tool_names(agents[0])


@pytest.mark.parametrize('provider', ['anthropic', 'google'])
def test_a_tool_or_output_choice_that_allows_text_is_the_agents_own(provider: str) -> None:
    from pydantic_ai.settings import ToolOrOutput

    mock = Mock(PROVIDERS[provider](), Script())
    events: list[CompactionEvent] = []
    agent = Agent(
        mock.model(),
        capabilities=[Fork(trigger=TRIGGER, observer=events.append)],
        model_settings={'tool_choice': ToolOrOutput(function_tools=['read_log'])},
    )
    plain_tools(agent)
    agent.run_sync('Audit logs 1-8 and report.')
    forks = [p for p in mock.payloads if _marked(p)]
    agents = [p for p in mock.payloads if not _marked(p)]
    assert forks and _tool_names(agents[0]) == ['read_log']  # the agent's own restriction
    assert all(_tool_names(fork) == _tool_names(agents[0]) and _choice(fork) == _choice(agents[0]) for fork in forks)
