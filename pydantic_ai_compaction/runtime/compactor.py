"""Model calls made on behalf of a compaction: retries, usage accounting, text extraction."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart, repair_messages
from pydantic_ai.models import Model, ModelRequestContext, ModelRequestParameters, infer_model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.durable import compactor_request
from pydantic_ai_compaction.runtime.encoding import clean_text
from pydantic_ai_compaction.runtime.retry import is_transient


def resolve_model(model: Model | str | None, ctx: CompactionContext) -> Model:
    """The model a compaction call goes to: an override, or the request's own model."""
    if model is None:
        return ctx.model
    return infer_model(model) if isinstance(model, str) else model


def _account(ctx: CompactionContext, usage: RequestUsage) -> None:
    ctx.usage.requests += 1
    ctx.usage.input_tokens += usage.input_tokens
    ctx.usage.output_tokens += usage.output_tokens
    ctx.usage.cache_read_tokens += usage.cache_read_tokens
    ctx.usage.cache_write_tokens += usage.cache_write_tokens
    # Counted in the run's usage like any request, so usage limits and cost reports see it.
    ctx.run.usage.incr(usage)
    ctx.run.usage.requests += 1


def _retrying(ctx: CompactionContext) -> AsyncRetrying:
    def count_failure(_: object) -> None:
        ctx.usage.failed_attempts += 1

    return AsyncRetrying(
        stop=stop_after_attempt(ctx.retry.attempts),
        wait=wait_exponential(multiplier=ctx.retry.initial_wait, max=ctx.retry.max_wait),
        retry=retry_if_exception(is_transient),
        before_sleep=count_failure,
        reraise=True,
    )


async def request(
    ctx: CompactionContext,
    messages: Sequence[ModelMessage],
    *,
    model: Model | str | None = None,
    settings: ModelSettings | None = None,
    parameters: ModelRequestParameters | None = None,
) -> ModelResponse:
    """Send *messages* to a model, retrying transient errors, and account for the usage.

    Raises whatever the last attempt raised when retries are exhausted or the error is not
    transient; the runtime turns that into the fallback layout.
    """
    target = resolve_model(model, ctx)
    params = parameters if parameters is not None else ModelRequestParameters()
    # What the agent graph does before every request: provider adapters refuse parts (retry
    # feedback, tool-search and instruction bookkeeping) they expect to have been prepared.
    prepared = target.prepare_messages(repair_messages(list(messages)), params)
    response: ModelResponse | None = None
    try:
        async for attempt in _retrying(ctx):
            with attempt:
                # Replayed, not re-sent, when a durable workflow recovers (runtime/durable.py).
                response = await compactor_request(
                    'request', target, lambda: target.request(prepared, settings, params)
                )
    except BaseException:
        ctx.usage.failed_attempts += 1
        raise
    assert response is not None
    _account(ctx, response.usage)
    return response


async def provider_compact(ctx: CompactionContext, messages: Sequence[ModelMessage]) -> ModelResponse:
    """Ask the request's model to compact *messages* itself (`Model.compact_messages`).

    Raises `NotImplementedError` when the model has no provider-side compaction.
    """
    request_context = ModelRequestContext(
        model=ctx.model,
        messages=list(messages),
        model_settings=ctx.model_settings,
        model_request_parameters=ctx.parameters,
    )
    response: ModelResponse | None = None
    try:
        async for attempt in _retrying(ctx):
            with attempt:
                response = await compactor_request(
                    'compact', ctx.model, lambda: ctx.model.compact_messages(request_context)
                )
    except (NotImplementedError, UserError):
        raise  # the model has no (on-demand) provider compaction: not a failed attempt
    except BaseException:
        ctx.usage.failed_attempts += 1  # the last attempt, as `request` counts it
        raise
    assert response is not None
    _account(ctx, response.usage)
    return response


def response_text(response: ModelResponse) -> str:
    """The text a response carries, its text parts joined."""
    return ''.join(part.content for part in response.parts if isinstance(part, TextPart)).strip()


def text_only(ctx: CompactionContext) -> tuple[ModelSettings, ModelRequestParameters]:
    """Settings and parameters for a request in the conversation that must answer in text.

    Every tool definition stays, output tools included, so the prefix matches the agent's own
    requests and the provider's cache can serve it; `tool_choice='none'` asks for text where the
    provider supports it, and text output is allowed whatever the agent's output type.
    """
    settings: ModelSettings = {**(ctx.model_settings or {}), 'tool_choice': 'none'}
    return settings, replace(ctx.parameters, allow_text_output=True)


def with_appended_prompt(messages: Sequence[ModelMessage], prompt: str) -> list[ModelMessage]:
    """*messages* with *prompt* appended to the final request (a new request if the last is a response).

    Appending to the current request keeps every earlier byte identical to what the agent sends,
    which is what lets a fork reuse the conversation's cached prefix.
    """
    prompt = clean_text(prompt)  # our own text: it must encode whatever the history holds
    out = list(messages)
    if out and isinstance(out[-1], ModelRequest):
        last = out[-1]
        out[-1] = replace(last, parts=[*last.parts, UserPromptPart(prompt)])
    else:
        out.append(ModelRequest(parts=[UserPromptPart(prompt)]))
    return out


_SLOT = re.compile(r'\{([a-z_]+)\}')


def fill(template: str, /, *, partial: bool = False, **slots: str) -> str:
    """*template* with each `{name}` slot replaced by its value, in one pass.

    Unlike `str.format`, braces that are not a slot (a JSON example) are left as written, a value's own
    braces are never read as slots, and a slot without a value, or a value without a slot, raises
    `KeyError`: no template placeholder can reach a model. `partial=True` leaves slots without a value
    in place, for a template filled in two steps (fixed parts once, the rest per call).
    """
    used: set[str] = set()

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in slots:
            if partial:
                return match.group(0)
            raise KeyError(f'prompt slot {{{name}}} has no value')
        used.add(name)
        return slots[name]

    out = _SLOT.sub(value, template)
    if unused := sorted(set(slots) - used):
        raise KeyError(f'prompt has no slot for {", ".join(unused)}')
    return out
