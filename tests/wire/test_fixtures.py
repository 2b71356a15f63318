"""The canned responses: each template names the recorded exchange it follows, and parses in the provider's SDK."""

from __future__ import annotations

import json

import pytest

from . import canned
from .providers import Call, Say

TEMPLATES = sorted(path.stem for path in canned.FIXTURES.glob('*.json'))


@pytest.mark.parametrize('name', TEMPLATES)
def test_every_fixture_names_what_it_follows(name: str) -> None:
    data = json.loads((canned.FIXTURES / f'{name}.json').read_text())
    assert 'pydantic/pydantic-ai tests/models/cassettes/' in data['follows'] or name == 'errors', data['follows']


SAY = Say(calls=(Call('read_log', {'index': 1}), Call('read_log', {'index': 2})))


def test_openai_chat_completion_parses() -> None:
    from openai.types.chat import ChatCompletion

    completion = ChatCompletion.model_validate(canned.openai_chat_completion(SAY, 7, 1_000))
    calls = completion.choices[0].message.tool_calls or []
    assert [c.id for c in calls] == ['call_0007_0', 'call_0007_1']
    assert completion.usage is not None and completion.usage.prompt_tokens == 1_000


def test_openai_response_parses_with_reasoning_first() -> None:
    from openai.types.responses import Response

    response = Response.model_validate(canned.openai_response(SAY, 7, 1_000))
    assert [item.type for item in response.output] == ['reasoning', 'function_call', 'function_call']
    compaction = canned.openai_responses_compaction(8)
    assert compaction['output'][-1]['type'] == 'compaction' and compaction['output'][-1]['id'] == 'cmp_000008'


def test_anthropic_message_parses_with_signed_thinking_first() -> None:
    from anthropic.types.beta import BetaMessage

    message = BetaMessage.model_validate(canned.anthropic_message(SAY, 7, 1_000, thinking=True))
    assert [block.type for block in message.content] == ['thinking', 'tool_use', 'tool_use']
    assert message.content[0].signature.endswith('000007')  # pyright: ignore[reportAttributeAccessIssue]
    summary = BetaMessage.model_validate(canned.anthropic_compaction(8))
    assert summary.content[0].type == 'compaction'


def test_google_response_parses_with_one_signature_per_step() -> None:
    from google.genai.types import GenerateContentResponse

    response = GenerateContentResponse.model_validate(canned.google_response(SAY, 7, 1_000))
    parts = response.candidates[0].content.parts  # pyright: ignore[reportOptionalSubscript, reportOptionalMemberAccess]
    assert parts is not None and [bool(p.thought) for p in parts] == [True, False, False]
    assert [p.thought_signature is not None for p in parts[1:]] == [True, False]
