"""Mocked provider endpoints behind pydantic-ai's real model classes.

Each `Provider` builds a real pydantic-ai model (`OpenAIChatModel`, `OpenAIResponsesModel`,
`AnthropicModel`, `GoogleModel`) whose SDK client talks to an `httpx2.MockTransport`. The transport
records every request payload and answers with a response in the provider's own format, built by
`canned.py` from the shapes of pydantic-ai's recorded exchanges. What the mocked model *says* is
decided by a provider-neutral `Script`, so every capability sees the same conversation on every
provider.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Any

import httpx2
from pydantic_ai.models import Model

from pydantic_ai_compaction.testing import wire

from . import canned

Payload = dict[str, Any]


@dataclass(frozen=True)
class Call:
    """One tool call the scripted model makes."""

    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Say:
    """What the scripted model answers: tool calls (several = parallel calls), or text."""

    calls: tuple[Call, ...] = ()
    text: str | None = None


@dataclass
class Recorded:
    """One HTTP exchange with the mocked provider."""

    path: str
    payload: Payload
    status: int
    response: Payload


@dataclass
class Mock:
    """The mocked provider endpoint: records payloads, answers through the provider's encoder."""

    provider: Provider
    answer: Callable[[str, str], Say]
    """Given the text of the request's final user turn and the whole request body, what to say."""
    fail: Callable[[str, Payload], int | None] = lambda path, payload: None
    """An HTTP error status to answer with instead (provider 4xx/5xx), or `None`."""
    exchanges: list[Recorded] = field(default_factory=list[Recorded])
    issued: wire.Issued = field(default_factory=wire.Issued)
    """Every signed or opaque item this provider handed out, for the validators' unmodified-item checks."""
    counter: int = 0
    prompt_tokens: int = 0
    body: str = ''

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        payload: Payload = json.loads(request.content) if request.content else {}
        path = request.url.path
        self.counter += 1
        self.prompt_tokens = len(request.content) // 4
        self.body = request.content.decode()
        status = self.fail(path, payload)
        if status is not None:
            body = self.provider.error(status)
            self.exchanges.append(Recorded(path, payload, status, body))
            return httpx2.Response(status, json=body)
        body = self.provider.respond(self, path, payload)
        self.exchanges.append(Recorded(path, payload, 200, body))
        return httpx2.Response(200, json=body)

    def model(self, **kwargs: Any) -> Model:
        client = httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle))
        return self.provider.build(client, **kwargs)

    @property
    def payloads(self) -> list[Payload]:
        """Every request the model sent that reached a conversation endpoint."""
        return [e.payload for e in self.exchanges]

    def problems(self) -> list[str]:
        """Every rule violation in every recorded request, with the request's index."""
        out: list[str] = []
        for index, exchange in enumerate(self.exchanges):
            kind = self.provider.kind if not exchange.path.endswith('/compact') else 'openai-responses'
            out.extend(
                f'request {index} ({exchange.path}): {p}' for p in wire.problems(kind, exchange.payload, self.issued)
            )
        return out


class Provider:
    """How one provider's wire format is read and written."""

    kind: wire.ProviderKind
    name: str

    def build(self, client: httpx2.AsyncClient, **kwargs: Any) -> Model:
        raise NotImplementedError

    def respond(self, mock: Mock, path: str, payload: Payload) -> Payload:
        raise NotImplementedError

    def error(self, status: int) -> Payload:
        raise NotImplementedError

    def last_user_text(self, payload: Payload) -> str:
        raise NotImplementedError


class OpenAIChat(Provider):
    kind = 'openai-chat'
    name = 'openai-chat'

    def build(self, client: httpx2.AsyncClient, **kwargs: Any) -> Model:
        from openai import AsyncOpenAI
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        sdk = AsyncOpenAI(api_key='test', http_client=client, max_retries=0)
        return OpenAIChatModel('gpt-4.1-mini', provider=OpenAIProvider(openai_client=sdk), **kwargs)

    def respond(self, mock: Mock, path: str, payload: Payload) -> Payload:
        assert path.endswith('/chat/completions'), path
        return canned.openai_chat_completion(
            mock.answer(self.last_user_text(payload), mock.body), mock.counter, mock.prompt_tokens
        )

    def error(self, status: int) -> Payload:
        return canned.openai_error(status)

    def last_user_text(self, payload: Payload) -> str:
        return wire.last_user_text('openai-chat', payload)


class OpenAIResponses(Provider):
    kind = 'openai-responses'
    name = 'openai-responses'

    def build(self, client: httpx2.AsyncClient, **kwargs: Any) -> Model:
        from openai import AsyncOpenAI
        from pydantic_ai.models.openai import OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider

        sdk = AsyncOpenAI(api_key='test', http_client=client, max_retries=0)
        return OpenAIResponsesModel('gpt-5.2', provider=OpenAIProvider(openai_client=sdk), **kwargs)

    def respond(self, mock: Mock, path: str, payload: Payload) -> Payload:
        if path.endswith('/responses/compact'):
            body = canned.openai_responses_compaction(mock.counter)
            item = body['output'][-1]
            mock.issued.opaque[item['id']] = item
            return body
        assert path.endswith('/responses'), path
        body = canned.openai_response(
            mock.answer(self.last_user_text(payload), mock.body), mock.counter, mock.prompt_tokens
        )
        output = body['output']
        for index, item in enumerate(output):
            if item['type'] == 'reasoning':
                # Every output item returned after the reasoning, up to the next one: none may go back by its id alone.
                following = list(takewhile(lambda after: after['type'] != 'reasoning', output[index + 1 :]))
                followed_by = [after.get('call_id') or after['id'] for after in following]
                mock.issued.opaque[item['id']] = {**item, 'followed_by': followed_by}
        return body

    def error(self, status: int) -> Payload:
        return canned.openai_error(status)

    def last_user_text(self, payload: Payload) -> str:
        return wire.last_user_text('openai-responses', payload)


class Anthropic(Provider):
    kind = 'anthropic'
    name = 'anthropic'

    def __init__(self, model_name: str = 'claude-sonnet-4-6') -> None:
        self.model_name = model_name

    def build(self, client: httpx2.AsyncClient, **kwargs: Any) -> Model:
        from anthropic import AsyncAnthropic
        from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
        from pydantic_ai.providers.anthropic import AnthropicProvider

        sdk = AsyncAnthropic(api_key='test', http_client=client, max_retries=0)
        # As in the recorded thinking exchanges: extended thinking on, an explicit `max_tokens`.
        settings = AnthropicModelSettings(
            max_tokens=4096, anthropic_thinking={'type': 'enabled', 'budget_tokens': 1024}
        )
        return AnthropicModel(
            self.model_name, provider=AnthropicProvider(anthropic_client=sdk), settings=settings, **kwargs
        )

    def respond(self, mock: Mock, path: str, payload: Payload) -> Payload:
        assert path.endswith('/messages'), path
        if payload.get('compaction'):
            body = canned.anthropic_compaction(mock.counter)
            block = body['content'][0]
            mock.issued.opaque[block['signature']] = block
            return body
        thinking = bool(payload.get('thinking'))
        body = canned.anthropic_message(
            mock.answer(self.last_user_text(payload), mock.body), mock.counter, mock.prompt_tokens, thinking=thinking
        )
        for block in body['content']:
            if block['type'] == 'thinking':
                mock.issued.signed[block['signature']] = block['thinking']
        return body

    def error(self, status: int) -> Payload:
        return canned.anthropic_error(status)

    def last_user_text(self, payload: Payload) -> str:
        return wire.last_user_text('anthropic', payload)


class Google(Provider):
    kind = 'google'
    name = 'google'

    def build(self, client: httpx2.AsyncClient, **kwargs: Any) -> Model:
        from pydantic_ai.models.google import GoogleModel
        from pydantic_ai.providers.google import GoogleProvider

        return GoogleModel('gemini-2.5-flash', provider=GoogleProvider(api_key='test', http_client=client), **kwargs)

    def respond(self, mock: Mock, path: str, payload: Payload) -> Payload:
        assert path.endswith(':generateContent'), path
        body = canned.google_response(
            mock.answer(self.last_user_text(payload), mock.body), mock.counter, mock.prompt_tokens
        )
        for part in body['candidates'][0]['content']['parts']:
            if 'thoughtSignature' in part and 'functionCall' in part:
                mock.issued.signed[part['thoughtSignature']] = json.dumps(part['functionCall'], sort_keys=True)
        return body

    def error(self, status: int) -> Payload:
        return canned.google_error(status)

    def last_user_text(self, payload: Payload) -> str:
        return wire.last_user_text('google', payload)


PROVIDERS: Mapping[str, Callable[[], Provider]] = {
    'openai-chat': OpenAIChat,
    'openai-responses': OpenAIResponses,
    'anthropic': Anthropic,
    'google': Google,
}
