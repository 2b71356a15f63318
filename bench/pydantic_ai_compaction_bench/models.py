"""Models for the benchmarks: any OpenAI-compatible server (llama.cpp, vLLM, Ollama) by its base URL.

`pai-compaction bench … --model openai:NAME --base-url http://127.0.0.1:8080/v1` (or the
`PAC_BASE_URL` environment variable) sends every request of the run, agent and compactor alike, to
that server through pydantic-ai's `OpenAIChatModel`.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from pydantic_ai_compaction_bench.cost import PriceTable

BASE_URL_ENV = 'PAC_BASE_URL'
"""Environment variable read when `--base-url` is not given."""

FREE = PriceTable(0.0, 0.0, 0.0, 0.0)
"""Prices of a self-hosted server when none are given."""

PLACEHOLDER_KEY = 'not-needed'
"""API key sent when neither `--api-key` nor `OPENAI_API_KEY` is set: local servers ignore it, the SDK wants one."""


def check_base_url(base_url: str) -> str:
    """*base_url* if it is an absolute http(s) URL, else `ValueError` naming the value."""
    parsed = urlparse(base_url)
    if parsed.scheme not in ('http', 'https') or not parsed.netloc:
        raise ValueError(f'--base-url must be an http(s) URL such as http://127.0.0.1:8080/v1, got {base_url!r}.')
    return base_url.rstrip('/')


def model_name(model: str) -> str:
    """The server-side name in `openai:NAME`; `ValueError` for any other provider prefix."""
    provider, _, name = model.partition(':')
    if provider not in ('openai', 'openai-chat') or not name:
        raise ValueError(f'--base-url needs --model openai:NAME (an OpenAI-compatible server), got {model!r}.')
    return name


def openai_compatible(model: str, base_url: str, api_key: str | None = None) -> OpenAIChatModel:
    """An `OpenAIChatModel` for `openai:NAME` served at *base_url*."""
    key = api_key or os.environ.get('OPENAI_API_KEY') or PLACEHOLDER_KEY
    provider = OpenAIProvider(base_url=check_base_url(base_url), api_key=key)
    return OpenAIChatModel(model_name(model), provider=provider)


def use_base_url(model: str, base_url: str | None) -> str:
    """Route this process's `openai:NAME` requests to *base_url* (or `PAC_BASE_URL`); the model string to run.

    The benchmark runner builds its models from strings, and pydantic-ai's OpenAI provider reads
    `OPENAI_BASE_URL` when it builds one, so setting it here reaches every run. `openai:NAME` becomes
    `openai-chat:NAME`: OpenAI-compatible servers speak Chat Completions, while pydantic-ai maps
    `openai:` to the Responses API. Without a URL, *model* is returned unchanged.
    """
    url = server_url(base_url)
    if url is None:
        return model
    name = model_name(model)
    os.environ['OPENAI_BASE_URL'] = url
    if not os.environ.get('OPENAI_API_KEY', '').strip():
        # Set but empty (`OPENAI_API_KEY=` in a shell or an env file), the SDK refuses to build the client
        # ("Missing credentials") where an unset one works: a local server needs no key.
        os.environ['OPENAI_API_KEY'] = PLACEHOLDER_KEY
    return f'openai-chat:{name}'


def server_url(base_url: str | None) -> str | None:
    """The server `use_base_url` routes to: *base_url*, else `PAC_BASE_URL`, checked (`check_base_url`); or None."""
    url = base_url or os.environ.get(BASE_URL_ENV) or None
    return check_base_url(url) if url is not None else None
