"""`testing.wire` on a conversation that changes provider: Gemini's documented signature for a call it did not
issue is valid, while a call it did sign still has to come back with its own signature."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pydantic_ai import Agent, models

from pydantic_ai_compaction import StatelessSummary, Trigger
from pydantic_ai_compaction.testing import wire

from .wire.providers import PROVIDERS, Mock
from .wire.script import Script, plain_tools


@pytest.fixture(autouse=True)
def allow_model_requests() -> Iterator[None]:
    with models.override_allow_model_requests(True):
        yield


def _agent(mock: Mock) -> Agent[None, str]:
    agent = Agent(mock.model(), capabilities=[StatelessSummary(trigger=Trigger(tokens=2_500))], system_prompt='Audit.')
    plain_tools(agent)

    return agent


def test_a_conversation_moved_to_gemini_sends_valid_requests() -> None:
    openai, google = Mock(PROVIDERS['openai-responses'](), Script()), Mock(PROVIDERS['google'](), Script())
    first = _agent(openai).run_sync('Audit logs 1-8 and report.')
    second = _agent(google).run_sync('Now audit the next eight logs.', message_history=first.all_messages())
    assert second.output == 'report: done'
    # The first Gemini request carries the calls OpenAI made, with the signature Gemini documents for them.
    assert wire.GOOGLE_SKIP_SIGNATURE in json.dumps(google.payloads[0])
    assert google.problems() == []


def test_a_signed_call_sent_with_the_skip_signature_is_refused() -> None:
    call = {'id': 'call_1', 'name': 'get_answer', 'args': {}}
    payload = {
        'contents': [
            {'role': 'user', 'parts': [{'text': 'What is the answer?'}]},
            {'role': 'model', 'parts': [{'functionCall': call, 'thoughtSignature': wire.GOOGLE_SKIP_SIGNATURE}]},
            {'role': 'user', 'parts': [{'functionResponse': {**call, 'response': {'return_value': 42}}}]},
        ]
    }
    issued = wire.Issued(signed={'Cr0FAb4-real': json.dumps(call, sort_keys=True)})
    assert wire.problems('google', payload, issued) == [
        '[google.signature-unmodified] content 1: a signed function call lost its signature'
    ]
    assert wire.problems('google', payload, wire.Issued(signed={'Cr0FAb4-real': '{"other": 1}'})) == []
