"""A compaction request that continues the conversation on a model of another provider than the agent's, with
thinking on, through pydantic-ai's real model classes over endpoints that refuse what the providers refuse.

Anthropic answers 400 to a request with thinking on whose last assistant turn called the tools whose results the
request carries, unless that turn starts with its signed thinking block ("a final `assistant` message must start with
a thinking block"). An agent on OpenAI or Gemini has no such block in its history (pydantic-ai sends its reasoning
to Anthropic as text), nor has an Anthropic agent without thinking: the fork's request turns thinking off for itself.
Anthropic thinking sent to OpenAI or Gemini goes as text, its signature left out, by pydantic-ai alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import httpx2
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, models
from pydantic_ai.messages import (
    CompactionPart,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.anthropic import AnthropicModelSettings
from pydantic_ai.settings import ModelSettings

from pydantic_ai_compaction import CompactionEvent, ForgetReasoning, Fork, StatelessSummary, Trigger
from pydantic_ai_compaction.processors.strategies.fork import FORK_MARKER
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER
from pydantic_ai_compaction.processors.views.forget import reasoning_decision
from pydantic_ai_compaction.runtime import compactor
from pydantic_ai_compaction.testing import wire

from .wire import canned
from .wire.providers import PROVIDERS, Anthropic, Call, Mock, Payload, Say
from .wire.script import Script, plain_tools

TRIGGER = Trigger(tokens=2_500)

REFUSAL = (
    'messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` '
    'is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of '
    '`tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid '
    'this requirement, disable `thinking`. Please consult our documentation at '
    'https://docs.claude.com/en/docs/build-with-claude/extended-thinking'
)
"""The API's answer to such a request, as reported from live traffic (anomalyco/opencode#3077,
Kilo-Org/kilocode#5219)."""

EXTENDED = AnthropicModelSettings(anthropic_thinking={'type': 'enabled', 'budget_tokens': 1024})


class StrictAnthropic(Anthropic):
    """The Anthropic endpoint, thinking only when the request asks for it, with the model's own settings."""

    def __init__(self, settings: ModelSettings | None = None, model_name: str = 'claude-sonnet-4-6') -> None:
        super().__init__(model_name)
        self.settings = settings

    def build(self, client: httpx2.AsyncClient, **kwargs: Any) -> Model:
        from anthropic import AsyncAnthropic
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        sdk = AsyncAnthropic(api_key='test', http_client=client, max_retries=0)
        settings: ModelSettings = {'max_tokens': 4096, **(self.settings or {})}
        return AnthropicModel(self.model_name, provider=AnthropicProvider(anthropic_client=sdk), settings=settings)

    def respond(self, mock: Mock, path: str, payload: Payload) -> Payload:
        assert path.endswith('/messages'), path
        body = canned.anthropic_message(
            mock.answer(self.last_user_text(payload), mock.body),
            mock.counter,
            mock.prompt_tokens,
            thinking=_thinks(payload),
        )
        for block in body['content']:
            if block['type'] == 'thinking':
                mock.issued.signed[block['signature']] = block['thinking']
        return body

    def error(self, status: int) -> Payload:
        return {'type': 'error', 'error': {'type': 'invalid_request_error', 'message': REFUSAL}}


def _thinks(payload: Payload) -> bool:
    thinking: dict[str, Any] = payload.get('thinking') or {}
    return thinking.get('type') in ('enabled', 'adaptive')


def _refuse(path: str, payload: Payload) -> int | None:
    """400 where Anthropic refuses: thinking on, and the running tool loop's assistant turn opens without it."""
    problems = wire.anthropic_problems(payload)
    return 400 if any('running tool loop must start with its thinking block' in p for p in problems) else None


def _anthropic(settings: ModelSettings | None = EXTENDED, model_name: str = 'claude-sonnet-4-6') -> Mock:
    return Mock(StrictAnthropic(settings, model_name), Script(), fail=_refuse)


def _marked(payload: Payload, marker: str = FORK_MARKER) -> bool:
    return marker in json.dumps(payload)


def _records(events: list[CompactionEvent]) -> list[Any]:
    return [e.record for e in events if e.kind == 'compacted' and e.record is not None]


def _forked_run(agent_model: Any, settings: ModelSettings | None = None, **fork: Any) -> list[Any]:
    """A tool loop of an agent on *agent_model* (with *settings*) and `Fork(**fork)`: its compaction records, each
    checked to have compacted (no fallback), at least two."""
    events: list[CompactionEvent] = []
    agent = Agent(
        agent_model, model_settings=settings, capabilities=[Fork(trigger=TRIGGER, observer=events.append, **fork)]
    )
    plain_tools(agent)

    assert agent.run_sync('Audit logs 1-8 and report.').output == 'report: done'
    records = _records(events)
    assert len(records) >= 2 and [r.fallback_reason for r in records] == [None] * len(records)
    return records


def _forked_openai_run(fork_model: Any) -> list[Any]:
    """`_forked_run` of an OpenAI Responses agent with `Fork(model=fork_model)`."""
    return _forked_run(Mock(PROVIDERS['openai-responses'](), Script()).model(), model=fork_model)


def _assistant_turn_opening(payload: Payload) -> str:
    """The first block type of the assistant turn the request's tool results answer."""
    messages = payload['messages']
    assistant = [m for m in messages if m['role'] == 'assistant'][-1]
    return assistant['content'][0]['type']


@pytest.fixture(autouse=True)
def allow_model_requests() -> Iterator[None]:
    with models.override_allow_model_requests(True):
        yield


@pytest.mark.parametrize('thinking', ['anthropic_thinking', 'unified'])
@pytest.mark.parametrize('agent_provider', ['openai-responses', 'openai-chat', 'google'])
def test_a_fork_on_anthropic_with_thinking_continues_another_providers_tool_loop(
    agent_provider: str, thinking: str
) -> None:
    """Thinking on by the fork model's own settings, or by the agent's unified `thinking` (carried to the fork in the
    request parameters): either way the fork request goes without it, and is answered."""
    fork = _anthropic(EXTENDED if thinking == 'anthropic_thinking' else None)
    agent_mock = Mock(PROVIDERS[agent_provider](), Script())
    settings: ModelSettings | None = {'thinking': 'high'} if thinking == 'unified' else None
    records = _forked_run(agent_mock.model(), settings, model=fork.model())
    assert [e.status for e in fork.exchanges] == [200] * len(records)
    for payload in fork.payloads:
        assert _marked(payload)
        # The history's assistant turn opens with a tool call (the agent's reasoning went as text) ...
        assert _assistant_turn_opening(payload) == 'tool_use'
        # ... so this request does not think: pydantic-ai's `thinking=False` leaves `thinking` out for a model that
        # thinks only when asked, the model's own `anthropic_thinking` unset for it.
        assert 'thinking' not in payload
        assert 'output_config' not in payload  # no effort left over from the unified `thinking='high'`
    assert fork.problems() == []
    assert agent_mock.problems() == []


def test_a_fork_on_the_agents_own_anthropic_model_keeps_its_thinking() -> None:
    """The agent's own Anthropic model with thinking: its tool turns open with their signed thinking blocks, which
    the fork request sends back unchanged, thinking on (the same settings as the agent's, for the cached prefix)."""
    mock = _anthropic()
    records = _forked_run(mock.model())
    forks = [p for p in mock.payloads if _marked(p)]
    assert len(forks) == len(records)
    for payload in forks:
        assert payload['thinking'] == {'type': 'enabled', 'budget_tokens': 1024}
        assert _assistant_turn_opening(payload) == 'thinking'
    assert all(e.status == 200 for e in mock.exchanges)
    assert mock.problems() == []  # every thinking block as it was signed


def test_a_fork_that_turns_thinking_on_for_an_anthropic_agent_without_it() -> None:
    """The agent's Anthropic model thinks only in the fork (`Fork(model_settings=...)`): the agent's tool turns carry
    no thinking block, so the fork request goes without thinking after all."""
    mock = _anthropic(None)
    records = _forked_run(mock.model(), model_settings=EXTENDED)
    forks = [p for p in mock.payloads if _marked(p)]
    assert len(forks) == len(records)
    assert all('thinking' not in p for p in forks)
    assert all(e.status == 200 for e in mock.exchanges)
    assert mock.problems() == []


def test_a_fork_on_a_fallback_model_whose_anthropic_model_answers_when_the_first_fails() -> None:
    """`FallbackModel(OpenAI, Anthropic with thinking)`: the OpenAI model fails (503) and the request goes to the
    Anthropic one, which would think in the OpenAI agent's tool loop; thinking is off for the request (for both models,
    which share its settings), and the Anthropic model answers."""
    from pydantic_ai.models.fallback import FallbackModel

    primary = Mock(PROVIDERS['openai-responses'](), Script(), fail=lambda path, payload: 503)
    anthropic = _anthropic()
    records = _forked_openai_run(FallbackModel(primary.model(), anthropic.model()))
    assert [e.status for e in primary.exchanges] == [503] * len(records)
    assert [e.status for e in anthropic.exchanges] == [200] * len(records)
    for payload in anthropic.payloads:
        assert _marked(payload)
        assert _assistant_turn_opening(payload) == 'tool_use'
        assert 'thinking' not in payload
    assert anthropic.problems() == []


@pytest.mark.parametrize('model_name', ['claude-opus-5', 'claude-haiku-5-5'])
@pytest.mark.parametrize('effort', ['max', 'xhigh'])
def test_a_fork_turning_thinking_off_lowers_an_effort_the_model_refuses_without_it(
    model_name: str, effort: str
) -> None:
    """These models think by default and cap the effort at `high` with thinking off (pydantic-ai refuses to send
    more): the fork request that turns thinking off sends `high`, and is answered."""
    fork = _anthropic(cast(ModelSettings, {'anthropic_effort': effort}), model_name)
    records = _forked_openai_run(fork.model())
    assert [e.status for e in fork.exchanges] == [200] * len(records)
    for payload in fork.payloads:
        assert payload['thinking'] == {'type': 'disabled'}
        assert payload['output_config'] == {'effort': 'high'}
    assert fork.problems() == []


def test_an_effort_the_model_takes_without_thinking_is_left_as_it_is() -> None:
    """Opus 4.8 accepts every effort with thinking off: turning thinking off leaves its `max`."""
    fork = _anthropic(cast(ModelSettings, {'anthropic_effort': 'max', 'thinking': True}), 'claude-opus-4-8')
    assert len(_forked_openai_run(fork.model())) == len(fork.payloads)  # one request a compaction, each answered
    for payload in fork.payloads:
        assert 'thinking' not in payload
        assert payload['output_config'] == {'effort': 'max'}
    assert fork.problems() == []


@pytest.mark.parametrize('fork_provider', ['openai-responses', 'openai-chat', 'google'])
def test_a_fork_on_openai_or_gemini_continues_an_anthropic_agents_thinking(fork_provider: str) -> None:
    """An Anthropic agent with thinking, a fork on OpenAI or Gemini: pydantic-ai sends the Anthropic thinking as text
    and never its signature, which they could not read; the fork is answered."""
    agent_mock = _anthropic()
    fork = Mock(PROVIDERS[fork_provider](), Script())
    _forked_run(agent_mock.model(), model=fork.model())
    signatures = set(agent_mock.issued.signed)
    assert signatures  # the agent's requests did think
    for payload in fork.payloads:
        text = json.dumps(payload)
        assert not any(signature in text for signature in signatures)
        # The reasoning itself is in the fork's request, as text.
        assert any(json.dumps(thought)[1:-1] in text for thought in agent_mock.issued.signed.values())
    assert fork.problems() == []
    assert agent_mock.problems() == []


def test_a_summary_on_anthropic_reads_a_transcript_and_keeps_its_thinking() -> None:
    """`StatelessSummary(model=...)` (as the curator and `Tiered`'s note writer) sends one user message holding a
    transcript: no tool loop, nothing refused, thinking left as the summarizer's settings say."""
    summarizer = _anthropic()
    agent_mock = Mock(PROVIDERS['openai-responses'](), Script())
    events: list[CompactionEvent] = []
    agent = Agent(
        agent_mock.model(),
        capabilities=[StatelessSummary(trigger=TRIGGER, model=summarizer.model(), observer=events.append)],
    )
    plain_tools(agent)

    assert agent.run_sync('Audit logs 1-8 and report.').output == 'report: done'
    records = _records(events)
    assert len(records) >= 2 and [r.fallback_reason for r in records] == [None] * len(records)
    assert len(summarizer.payloads) == len(records)
    for payload in summarizer.payloads:
        assert _marked(payload, SUMMARY_MARKER)
        assert [m['role'] for m in payload['messages']] == ['user']
        assert payload['thinking'] == {'type': 'enabled', 'budget_tokens': 1024}
    assert summarizer.problems() == []


_CALL = ToolCallPart('read_log', {'index': 1}, tool_call_id='c1')
_SIGNED = ThinkingPart('plan', signature='sig', provider_name='anthropic')


@pytest.mark.parametrize(
    ('parts', 'unsigned'),
    [
        ([_SIGNED, _CALL], False),
        # Redacted thinking: its data rides in the signature, and it is sent as a `redacted_thinking` block.
        ([ThinkingPart('', id='redacted_thinking', signature='data', provider_name='anthropic'), _CALL], False),
        ([CompactionPart('summary', provider_name='anthropic'), _SIGNED, _CALL], False),
        ([TextPart(''), _SIGNED, _CALL], False),
        ([_CALL], True),
        ([TextPart('reading'), _SIGNED, _CALL], True),  # the turn opens with text
        ([ThinkingPart('plan', signature='enc', provider_name='openai'), _CALL], True),  # sent as text
        ([ThinkingPart('plan', provider_name='anthropic'), _CALL], True),  # no signature (an interrupted stream)
    ],
)
def test_which_tool_loops_anthropic_would_refuse_with_thinking_on(parts: list[Any], unsigned: bool) -> None:
    messages = [
        ModelRequest(parts=[UserPromptPart('Audit.')]),
        ModelResponse(parts=parts),
        ModelRequest(parts=[ToolReturnPart('read_log', 'log 1', tool_call_id='c1'), UserPromptPart('[fork]')]),
    ]
    assert compactor._unsigned_tool_loop(messages, 'anthropic') is unsigned  # pyright: ignore[reportPrivateUsage]
    # A request that answers no tool call (a new user turn) is never refused for it.
    closed = [*messages[:2], ModelRequest(parts=[UserPromptPart('Next.')])]
    assert compactor._unsigned_tool_loop(closed, 'anthropic') is False  # pyright: ignore[reportPrivateUsage]


class _Verdict(BaseModel):
    verdict: str


@dataclass
class _EndsWithOutputTool(Script):
    """`Script`, each turn ended by a call of the output tool instead of a text."""

    def __call__(self, text: str, body: str = '') -> Say:
        said = super().__call__(text, body)
        return Say(calls=(Call('final_result', {'verdict': 'clean'}),)) if said.text == 'report: done' else said


def _dropped(messages: list[Any]) -> int:
    return sum(isinstance(m, ModelResponse) and reasoning_decision(m) == 'dropped' for m in messages)


def test_forget_reasoning_keeps_a_turn_that_ended_with_a_call_signed_until_the_next_answer() -> None:
    """A turn that ends with a call (an output tool's) leaves that call's result to the next request, where the new
    prompt joins it: Anthropic reads that assistant turn as the running tool loop and needs its thinking block, which
    `ForgetReasoning` dropped at the new prompt (the second run's first request was refused)."""
    mock = Mock(StrictAnthropic(EXTENDED), _EndsWithOutputTool(steps=3), fail=_refuse)
    agent = Agent(mock.model(), output_type=_Verdict, capabilities=[ForgetReasoning(policy='drop')])
    plain_tools(agent)
    first = agent.run_sync('Audit logs 1-3 and report.')
    second = agent.run_sync('Again.', message_history=first.all_messages())
    assert second.output == _Verdict(verdict='clean')
    assert [e.status for e in mock.exchanges] == [200] * len(mock.exchanges)
    assert mock.problems() == []
    # Not a test that forgets nothing: the first turn's steps lost their thinking, its last one once answered.
    assert _dropped(second.all_messages()) >= 4
    (ended,) = [m for m in first.all_messages() if isinstance(m, ModelResponse)][-1:]
    assert reasoning_decision(ended) in (None, 'deferred')


@dataclass
class _KeepsAnEarlyStep(Script):
    """`Script`, its fork replies keeping the second exchange they list (a step of an earlier turn)."""

    def __call__(self, text: str, body: str = '') -> Say:
        if self.kind(text) != 'fork':
            return super().__call__(text, body)
        self.kinds['fork'] += 1
        ids = re.findall(r'^\s*-?\s*(g\d+)\b', text, re.MULTILINE)
        summary = {
            'rules': ['ignore service legacy'],
            'facts': ['logs clean'],
            'progress': 'reading',
            'next_step': 'next',
        }
        return Say(text=json.dumps({'keep': ids[1:2], 'summary': summary}))


def test_a_compaction_never_ends_on_a_step_whose_thinking_was_forgotten() -> None:
    """A conversation continued with `ForgetReasoning` and a fork: at the new prompt the earlier turn's steps lose
    their thinking, and a fork that keeps one of them and drops what followed it (the turn's answer too) made that
    step the last before the request. Anthropic read it as the running tool loop and refused the agent's request;
    the runtime falls back (`reasoning`) and the run goes on."""
    events: list[CompactionEvent] = []
    mock = Mock(StrictAnthropic(EXTENDED), _KeepsAnEarlyStep(steps=6), fail=_refuse)
    earlier = Agent(mock.model())
    plain_tools(earlier)
    first = earlier.run_sync('Audit logs 1-8 and report.')
    fork = Fork(trigger=TRIGGER, observer=events.append)
    agent = Agent(mock.model(), capabilities=[ForgetReasoning(policy='drop'), fork])
    plain_tools(agent)
    second = agent.run_sync('Again.', message_history=first.all_messages())
    assert second.output == 'report: done'
    assert [e.status for e in mock.exchanges] == [200] * len(mock.exchanges)
    assert mock.problems() == []
    records = _records(events)
    assert records[0].fallback_reason == 'reasoning'  # the fork kept g1 and dropped the rest of the first turn
    assert 'g1' not in records[0].kept
    assert [r.fallback_reason for r in records[1:]] == [None] * (len(records) - 1)  # only where it had to


def test_a_compaction_may_end_on_a_step_whose_unsigned_thinking_was_forgotten() -> None:
    """The same layout with unsigned thinking (no provider asks for it back): the fork's choice stands."""
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    step = [0]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = ' '.join(str(getattr(part, 'content', '')) for part in messages[-1].parts)
        if FORK_MARKER in last:
            ids = re.findall(r'^\s*-?\s*(g\d+)\b', last, re.MULTILINE)
            summary = {'rules': [], 'facts': ['logs clean'], 'progress': 'reading', 'next_step': 'next'}
            return ModelResponse(parts=[TextPart(json.dumps({'keep': ids[1:2], 'summary': summary}))])
        step[0] += 1
        thought = ThinkingPart(f'thinking about step {step[0]} ' * 5)  # no signature, id or provider details
        if step[0] % 7 == 0:
            return ModelResponse(parts=[thought, TextPart('report: done')])
        return ModelResponse(parts=[thought, ToolCallPart('read_log', {'index': step[0]})])

    earlier = Agent(FunctionModel(respond))
    plain_tools(earlier)
    first = earlier.run_sync('Audit logs 1-6 and report.')
    events: list[CompactionEvent] = []
    agent = Agent(
        FunctionModel(respond),
        capabilities=[ForgetReasoning(policy='drop'), Fork(trigger=TRIGGER, observer=events.append)],
    )
    plain_tools(agent)
    assert agent.run_sync('Again.', message_history=first.all_messages()).output == 'report: done'
    records = _records(events)
    assert records[0].kept[:2] == ('g0', 'g1')  # the fork's layout, its kept step last before the new prompt
    assert [r.fallback_reason for r in records] == [None] * len(records)


def test_a_step_forgotten_by_an_earlier_version_is_taken_as_signed() -> None:
    """A step whose thinking was dropped before the mark existed carries only `reasoning: dropped`: whether it was
    signed is unknown, and it is taken as signed (a needless fallback costs less than a refused request)."""
    from pydantic_ai_compaction.protocols.metadata import MessageMarks
    from pydantic_ai_compaction.runtime.shape import forgotten_loop

    def step(marks: MessageMarks) -> list[Any]:
        call = ToolCallPart('read_log', {'index': 1}, tool_call_id='c1')
        response = ModelResponse(parts=[call], metadata=marks.to_metadata(None))
        done = ModelRequest(parts=[ToolReturnPart('read_log', 'log 1', tool_call_id='c1')])
        return [
            ModelRequest(parts=[UserPromptPart('audit')]),
            response,
            done,
            ModelRequest(parts=[UserPromptPart('on')]),
        ]

    earlier = step(MessageMarks(reasoning='dropped', thinking_chars=40))
    assert forgotten_loop(earlier) is earlier[1]
    assert forgotten_loop(step(MessageMarks(reasoning='dropped', thinking_chars=40, unsigned_thinking=True))) is None
    assert forgotten_loop(step(MessageMarks(reasoning='deferred', thinking_chars=40))) is None
