"""Model calls made on behalf of a compaction: retries, usage accounting, tracing, text extraction.

When the agent is instrumented (its run has a recording tracer), every compactor request goes through
pydantic-ai's `InstrumentedModel` on the run's tracer, with the run's content setting and format version: it
appears in the trace as the same `chat <model>` span as the agent's own requests (GenAI attributes, usage,
token metrics), one per attempt, nested under the compaction span. A provider-side compaction
(`Model.compact_messages`), which pydantic-ai does not trace, gets a span with the same GenAI attributes.
Not instrumented: the model is called directly, with nothing added.
"""

from __future__ import annotations

import asyncio
import re
import threading
import unicodedata
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Literal, cast

from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import Attributes
from pydantic_ai.exceptions import ModelHTTPError, UsageLimitExceeded, UserError
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    repair_messages,
)
from pydantic_ai.models import Model, ModelRequestContext, ModelRequestParameters, infer_model
from pydantic_ai.settings import ModelSettings, merge_model_settings
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RequestUsage
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from pydantic_ai_compaction.protocols.types import Exchange
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.durable import compactor_request
from pydantic_ai_compaction.runtime.encoding import clean_text
from pydantic_ai_compaction.runtime.events import ATTRIBUTE_PREFIX, instrumented
from pydantic_ai_compaction.runtime.retry import is_transient
from pydantic_ai_compaction.runtime.segment import ConversationView, fragment


def resolve_model(model: Model | str | None, ctx: CompactionContext) -> Model:
    """The model a compaction call goes to: an override, or the request's own model.

    A model name is built into a model once per run (and event loop), then reused by the run's other compaction
    calls: building one makes a provider with its own HTTP client (tens of milliseconds, mostly its TLS context,
    and a connection pool), which every call (a summary makes two, the curator one per user request) would pay
    again. Per run, as pydantic-ai builds a run's models from names: the next run builds it again, so a key or
    base URL set between runs is used. A name that cannot be built (unknown, a missing key or package) is not kept.
    """
    if model is None:
        return ctx.model
    if not isinstance(model, str):
        return model
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return infer_model(model)
    run = ctx.run
    # A client's connections belong to the loop that opened them. A run without an id (`replay`, a direct
    # `run_compaction`) is told by its run context object, checked to be the same one (its `id` may be reused).
    key = (run.run_id or id(run), model, loop)
    with _BUILT_LOCK:
        kept = _BUILT.get(key)
        if kept is not None and (kept[1] is None or kept[1]() is run):
            _BUILT.move_to_end(key)
            return kept[0]
    found = infer_model(model)
    with _BUILT_LOCK:
        _BUILT[key] = (found, None if run.run_id else weakref.ref(run))
        _BUILT.move_to_end(key)
        if len(_BUILT) > _BUILT_KEPT:
            _BUILT.popitem(last=False)
    return found


async def close_models(run: RunContext[Any]) -> None:
    """Close the models `resolve_model` built from names for *run*, when it ends: each owns an HTTP client.

    Entered and left once, as pydantic-ai closes the models it builds for a run, so the provider closes the client
    it made for itself (a model given as a model is never built here, so never closed). Only *run*'s models on this
    event loop: a run in another thread closes its own. Closing never fails the run.
    """
    loop = asyncio.get_running_loop()
    ident = run.run_id or id(run)
    with _BUILT_LOCK:
        keys = [
            key
            for key, (_, ref) in _BUILT.items()
            if key[0] == ident and key[2] is loop and (ref is None or ref() is run)
        ]
        models = [_BUILT.pop(key)[0] for key in keys]
    for model in models:
        try:
            async with model:
                pass
        except Exception:  # a client already closed, or one that fails to: nothing left to release
            pass


_BUILT: OrderedDict[tuple[str | int, str, asyncio.AbstractEventLoop], tuple[Model, weakref.ref[object] | None]] = (
    OrderedDict()
)
"""The models built from names, by run, name and loop, least recently used first (see `resolve_model`), each with
a weak reference to its run context when the run has no id."""

_BUILT_KEPT = 16
"""Models `_BUILT` keeps: those of the runs going on. A run's are closed when it ends (`close_models`, called by
every capability of ours that calls a compactor); those of a run that has no end to hook (a strategy driven by
harness's `compact_now` or as a tier of its `TieredCompaction`) stay until pushed out."""

_BUILT_LOCK = threading.Lock()
"""Guards `_BUILT`: runs in other threads (each with its loop) resolve names too."""


class _RunTracerProvider(TracerProvider):
    """Hands pydantic-ai's instrumentation the run's own tracer, so compactor spans join the run's trace."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> Tracer:
        del instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        return self._tracer


def traced(model: Model, ctx: CompactionContext) -> Model:
    """*model* behind pydantic-ai's `InstrumentedModel` on the run's tracer when the run is instrumented, else
    *model* itself.

    The run exposes its tracer, whether content is recorded and the format version, not the settings object,
    so equivalent settings are built from those. Binary content is never recorded in compactor spans (a
    compactor reads the whole history; images and files there would be copied into every trace).
    """
    run = ctx.run
    if not instrumented(run.tracer):
        return model
    # Imported here: only an instrumented run pays for it.
    from pydantic_ai.models.instrumented import InstrumentationSettings, InstrumentedModel

    if isinstance(model, InstrumentedModel):
        return model
    version = cast(Literal[2, 3, 4, 5, 6], run.instrumentation_version)
    with warnings.catch_warnings():
        # An older format version warns on construction; the user chose it for the run, not us.
        warnings.simplefilter('ignore', DeprecationWarning)
        settings = InstrumentationSettings(
            tracer_provider=_RunTracerProvider(run.tracer),
            include_content=run.trace_include_content,
            include_binary_content=False,
            version=version,
        )
    return InstrumentedModel(model, settings)


def _account(ctx: CompactionContext, usage: RequestUsage) -> None:
    ctx.usage.requests += 1
    ctx.usage.input_tokens += usage.input_tokens
    ctx.usage.output_tokens += usage.output_tokens
    ctx.usage.cache_read_tokens += usage.cache_read_tokens
    ctx.usage.cache_write_tokens += usage.cache_write_tokens
    # Counted in the run's usage like any request, so usage limits and cost reports see it.
    ctx.run.usage.incr(usage)
    ctx.run.usage.requests += 1


def check_usage_limits(ctx: CompactionContext) -> int:
    """Refuse a compactor request the run's `UsageLimits` leave no room for.

    pydantic-ai checks the limits before the capability hooks run, so a compactor request made there and the
    agent's own request after it were both sent even when only one more was allowed (`request_limit=3` sent
    four). A compaction is asked for only when the agent's request can follow it; a token limit already
    reached refuses it too. The runtime then falls back (`usage_limit`), which calls no model.

    Returns:
        How many attempts the request may make: `RetryPolicy.attempts`, or fewer when the request limit leaves
        room for fewer (each attempt reaches the provider; only the one that succeeds is counted in the usage).

    Raises:
        UsageLimitExceeded: The compactor request would take the run past a limit.
    """
    attempts = ctx.retry.attempts
    limits = ctx.run.usage_limits
    if limits is None:
        return attempts
    usage = ctx.run.usage
    if limits.request_limit is not None:
        # The agent's own request comes after; and this compaction's failed attempts reached the provider too,
        # though no usage counts them (a retried summary, then the omissions pass).
        room = limits.request_limit - usage.requests - ctx.usage.failed_attempts - 1
        if room < 1:
            raise UsageLimitExceeded(
                f'a compactor request and the agent request after it would exceed the request_limit of '
                f'{limits.request_limit} ({usage.requests} made)'
            )
        attempts = min(attempts, room)
    limits.check_before_request(usage)  # a token limit already reached
    return attempts


def _retrying(ctx: CompactionContext, attempts: int) -> AsyncRetrying:
    def count_failure(_: object) -> None:
        ctx.usage.failed_attempts += 1

    return AsyncRetrying(
        stop=stop_after_attempt(attempts),
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

    Thinking is turned off for this request where Anthropic would refuse it (see `_thinking_settings`).
    Raises whatever the last attempt raised when retries are exhausted or the error is not
    transient; the runtime turns that into the fallback layout.
    """
    attempts = check_usage_limits(ctx)
    target = resolve_model(model, ctx)
    params = parameters if parameters is not None else ModelRequestParameters()
    # What the agent graph does before every request: provider adapters refuse parts (retry
    # feedback, tool-search and instruction bookkeeping) they expect to have been prepared.
    prepared = target.prepare_messages(repair_messages(list(messages)), params)
    settings = _thinking_settings(target, prepared, settings, params)
    sender = traced(target, ctx)
    response: ModelResponse | None = None
    try:
        async for attempt in _retrying(ctx, attempts):
            with attempt:
                # Replayed, not re-sent, when a durable workflow recovers (runtime/durable.py).
                response = await compactor_request(
                    'request', target, lambda: sender.request(prepared, settings, params)
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
    attempts = check_usage_limits(ctx)
    request_context = ModelRequestContext(
        model=ctx.model,
        messages=list(messages),
        model_settings=ctx.model_settings,
        model_request_parameters=ctx.parameters,
    )
    response: ModelResponse | None = None
    try:
        async for attempt in _retrying(ctx, attempts):
            with attempt:
                response = await compactor_request(
                    'compact', ctx.model, lambda: _traced_provider_compact(ctx, request_context)
                )
    except (NotImplementedError, UserError):
        raise  # the model has no (on-demand) provider compaction: not a failed attempt
    except ModelHTTPError as error:
        if error.status_code == 404:
            # The agent's own requests reach this provider, its compaction endpoint does not (a compatible server
            # without it): the model has no provider compaction here, which is not a mistake in the setup.
            raise NotImplementedError(f'the provider has no compaction endpoint ({error})') from error
        ctx.usage.failed_attempts += 1
        raise
    except BaseException:
        ctx.usage.failed_attempts += 1  # the last attempt, as `request` counts it
        raise
    assert response is not None
    _account(ctx, response.usage)
    return response


async def _traced_provider_compact(ctx: CompactionContext, request_context: ModelRequestContext) -> ModelResponse:
    """One `compact_messages` attempt, in a GenAI client span when the run is instrumented."""
    model = ctx.model
    tracer = ctx.run.tracer
    if not instrumented(tracer):
        return await model.compact_messages(request_context)
    operation = 'compact_messages'
    attributes: dict[str, Any] = {
        'gen_ai.operation.name': operation,
        'gen_ai.provider.name': model.system,
        'gen_ai.system': model.system,
        'gen_ai.request.model': model.model_name,
    }
    with tracer.start_as_current_span(
        f'{operation} {model.model_name}',
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            response = await model.compact_messages(request_context)
        except (NotImplementedError, UserError):
            # No provider compaction here: the strategy emulates it, and this is not an error.
            span.set_attribute(f'{ATTRIBUTE_PREFIX}unsupported', True)
            raise
        except BaseException as error:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f'{type(error).__name__}: {error}'))
            span.set_attribute('error.type', type(error).__qualname__)
            raise
        response_attributes: dict[str, Any] = {
            'gen_ai.usage.input_tokens': response.usage.input_tokens,
            'gen_ai.usage.output_tokens': response.usage.output_tokens,
        }
        if response.model_name:
            response_attributes['gen_ai.response.model'] = response.model_name
        if response.provider_response_id:
            response_attributes['gen_ai.response.id'] = response.provider_response_id
        span.set_attributes(response_attributes)
        return response


def response_text(response: ModelResponse) -> str:
    """The text a response carries, its text parts joined; `''` when nothing of it is visible (blanks, or format
    characters alone such as a zero-width space: a summary of `\u200b` replaces the history with nothing)."""
    text = ''.join(part.content for part in response.parts if isinstance(part, TextPart)).strip()
    return text if visible(text) else ''


def visible(text: str) -> bool:
    """Whether *text* holds a character that is neither a blank nor a format character (`\u200b`, `\ufeff`) nor one
    of the letters drawn blank (the Braille blank, the Hangul fillers)."""
    return any(
        not character.isspace() and character not in _BLANK_LETTERS and unicodedata.category(character) != 'Cf'
        for character in text
    )


_BLANK_LETTERS = frozenset('\u2800\u115f\u1160\u3164\uffa0')
"""Characters Unicode counts as letters or symbols that are drawn as nothing."""


def no_text(response: ModelResponse, who: str) -> str:
    """Why *response* gives no text, for a failed proposal's detail: *who* called a tool instead (named), or
    returned no text."""
    calls = list(dict.fromkeys(part.tool_name for part in response.parts if isinstance(part, ToolCallPart)))
    return f'{who} called {", ".join(calls)} instead of answering in text' if calls else f'{who} returned no text'


def unusable(response: ModelResponse, text: str, who: str) -> tuple[str, str] | None:
    """Why a compactor's reply *text* (`response_text(response)`; *who* wrote it, for the detail) is no summary, as a
    failed proposal's reason and detail, or `None`: it has no text (`no_text`), the provider filtered it, the model
    declined (a short reply that opens by saying it cannot help), or it holds nothing but markup tags (a model that
    copies the prompt's `</transcript>`).

    Taken for a summary, a refusal replaces the dropped exchanges with "I'm sorry, I can't help with that".
    """
    if not text:
        return 'empty', no_text(response, who)
    if response.finish_reason == 'content_filter':
        return 'refused', 'the provider filtered the reply (finish reason content_filter)'
    if len(text) <= _REFUSAL_CHARS and _REFUSAL.match(text.replace('\u2019', "'")) is not None:
        return 'refused', f'the model declined to answer: {" ".join(text.split())[:120]!r}'
    if _MARKUP_ONLY.fullmatch(text) is not None:
        return 'empty', f'the reply is only markup: {text[:80]!r}'
    return None


_REFUSAL_CHARS = 400
"""Longest reply read as a refusal: a summary that only mentions what it cannot do goes on to say more."""

_REFUSAL = re.compile(
    r'(?:[\s*_`>#]|<[^<>\n]{1,40}>)*'
    r"(?:(?:(?:i'?m|i am|we'?re|we are)[ \t]+(?:so[ \t]+|very[ \t]+|really[ \t]+)?(?:sorry|afraid)|sorry|apologies|"
    r'i[ \t]+apologi[sz]e|unfortunately|as an ai(?:[ \t]+(?:language[ \t]+)?model)?)'
    r'[\s,.!:;\u2014\u2013-]*(?:but[ \t]+)?)?'
    r"(?:(?:i|we)[ \t]+(?:can(?:no|')?t|can[ \t]+not|cannot|am[ \t]+(?:not[ \t]+able|unable)|"
    r"are[ \t]+(?:not[ \t]+able|unable)|won'?t|will[ \t]+not|must[ \t]+decline|"
    r"(?:do[ \t]+not|don'?t)[ \t]+feel[ \t]+comfortable)|(?:i'm|we're)[ \t]+(?:not[ \t]+able|unable))"
    r'(?:[ \t]+(?:be[ \t]+able[ \t]+to|continue[ \t]+to|to))?[ \t]+'
    r'(?:help|assist|comply|provide|do|fulfil+|complete|continue|summari[sz]e|process|create|write|answer|engage|'
    r'produce|generate|proceed)'
    r'(?:[ \t]+(?:with|on|to))?[ \t]*'
    r'(?:(?:that|this|it|these|those|your|the|such)(?:[ \t]+(?:request|task|conversation|transcript|summary|'
    r'instructions?|content|one|kind[ \t]+of[ \t]+\w+))?|here|now)?[ \t]*(?:[.!?\u2014,:;]|\Z)',
    re.IGNORECASE,
)
"""The opening of a refusal, as models word one (`I'm sorry, but I can't help with that.`, `I cannot assist with
this request.`): a verb of helping and at most *that*, *this* or *the request*, then the sentence's end. A summary in
the first person names what it cannot do (`I can't complete the migration: the database was locked.`)."""

_MARKUP_ONLY = re.compile(r'(?:\s*</?[A-Za-z_][\w.-]*\s*/?>)+\s*')
"""A reply of markup tags and nothing else."""


def text_only(
    ctx: CompactionContext, *, model: Model | str | None = None, settings: ModelSettings | None = None
) -> tuple[ModelSettings, ModelRequestParameters]:
    """Settings and parameters for a request in the conversation that must answer in text.

    Every tool definition stays, output tools included, so the prefix matches the agent's own
    requests and the provider's cache can serve it; `tool_choice='none'` asks for text where that keeps the tool
    list (OpenAI), the agent's own choice is kept where it would not (Anthropic, Gemini), and text output is
    allowed whatever the agent's output type. The agent's output
    schema is left out of every other output mode: native output (OpenAI's strict `response_format`,
    Anthropic's `output_config`) would constrain the reply to it, prompted output adds JSON mode and an
    instruction to answer with it, which no compaction reply can follow, and image output is not text. An
    `'auto'` mode is settled here as the model settles it (native output where its profile or settings say so,
    as for Anthropic with thinking on), then made text if not tool output.

    Args:
        ctx: The compaction's context (the request's settings and parameters).
        model: The model the request goes to, when not the request's own (a strategy's `model=`).
        settings: The strategy's own settings, over the request's (a strategy's `model_settings=`).
    """
    target = resolve_model(model, ctx)
    # The strategy's own settings over the request's, then the tool choice decided for the model it goes to.
    settings = {**(merge_model_settings(ctx.model_settings, settings) or {})}
    if _filters_tools(target):
        # Anthropic's cache is invalidated by a changed `tool_choice` (its prompt-caching docs), and pydantic-ai sends
        # a choice among output tools to Anthropic and Gemini by leaving the other tools out of the request: with
        # `'none'` the fork's tool list (the head of the cached prefix) would differ from the agent's. The agent's own
        # choice is kept where it allows a text reply (the request is then the agent's own); one that forces a tool
        # becomes `'auto'`, which keeps every tool defined. The fork prompt asks for text; a reply that calls a tool
        # has no text and falls back.
        choice = settings.get('tool_choice')
        if choice == 'required' or isinstance(
            choice, list
        ):  # a tool is forced: no text reply (`ToolOrOutput` allows one)
            settings['tool_choice'] = 'auto'
    else:
        settings['tool_choice'] = 'none'  # OpenAI keeps the tool list under any choice (`allowed_tools`)
    parameters = replace(ctx.parameters, allow_text_output=True)
    mode = parameters.output_mode
    if mode == 'auto':
        # As the model settles it for the agent's own requests (`Model.prepare_request`), so that the tool
        # definitions sent match theirs: output tools where it uses them, none where it uses native output.
        settle = getattr(target, '_default_structured_output_mode', None)
        settled = settle(ctx.model_settings, parameters) if callable(settle) else 'tool'
        mode = 'tool' if settled == 'tool' and parameters.output_tools else 'text'
    elif mode not in ('tool', 'tool_or_text'):
        mode = 'text'  # native, prompted, or an image: the reply is text
    if mode != parameters.output_mode or parameters.output_object is not None:
        parameters = replace(parameters, output_mode=mode, output_object=None)
    return settings, parameters


def _unwrapped(model: Model) -> Model:
    """The model that answers for *model*: what a wrapper (instrumentation, a user's `WrapperModel`) sends to, and a
    `FallbackModel`'s first model, which answers unless it fails (the first of `_candidates`)."""
    candidates = _candidates(model)[0]
    return candidates[0] if candidates else model


def _is_model(model: Model, names: frozenset[str]) -> bool:
    """Whether *model* is one of pydantic-ai's model classes *names* (named: their packages are optional)."""
    return any(
        kind.__name__ in names and kind.__module__.startswith('pydantic_ai.models') for kind in type(model).__mro__
    )


def _filters_tools(model: Model) -> bool:
    """Whether *model* (unwrapped) is one whose `tool_choice` costs the prompt cache (Anthropic, Gemini)."""
    return _is_model(_unwrapped(model), _TOOL_FILTERING)


def _candidates(model: Model) -> tuple[list[Model], bool]:
    """The models that may answer for *model*: what wrappers send to, every model of a `FallbackModel` (each one it
    may send to), and whether a `FallbackModel` was passed through (whose `prepare_messages` leaves the messages to
    each model)."""
    found: object = model
    while True:
        inner = cast(object, getattr(found, 'wrapped', None))
        if not isinstance(inner, Model):
            break
        found = cast(object, inner)
    fallbacks = cast(object, getattr(found, 'models', None))
    if isinstance(fallbacks, list | tuple) and fallbacks:
        leaves: list[Model] = []
        for each in cast(Sequence[object], fallbacks):
            if isinstance(each, Model):
                leaves.extend(_candidates(cast(Model, each))[0])
        return leaves, True
    return [cast(Model, found)], False


def _thinking_settings(
    target: Model, messages: Sequence[ModelMessage], settings: ModelSettings | None, parameters: ModelRequestParameters
) -> ModelSettings | None:
    """*settings*, with thinking turned off when an Anthropic model would think in a tool loop it did not sign.

    With thinking on, Anthropic refuses (400, "a final `assistant` message must start with a thinking block")
    a request whose last assistant turn called the tools whose results the request carries, unless that turn
    starts with its signed thinking block (extended thinking docs, "Preserving thinking blocks"). A compaction
    request continues the conversation in the middle of its tool loop, and the loop's last assistant turn may
    carry no such block: it came from another provider (an agent on OpenAI or Gemini, whose reasoning
    pydantic-ai sends to Anthropic as text), or from this model with thinking off (a strategy's own
    `model_settings=` turning it on). The compaction asks for text and needs no thinking: thinking is turned
    off for that one request, as pydantic-ai's `thinking=False` turns it off for the model (a model that cannot
    turn it off still thinks, and is refused). Otherwise the settings are left as they are: a changed
    thinking setting invalidates Anthropic's cached message prefix (prompt-caching docs), which a fork
    on the agent's own model reuses.

    Every model the request may be sent to is asked, each over the messages as it prepares them: a `FallbackModel`
    whose first model is not Anthropic sends to its Anthropic one when the first fails. Its models share the
    settings, so `thinking=False` turns thinking off for all of them, which a request asking for text can afford.
    """
    candidates, fallback = _candidates(target)
    refused: list[tuple[Model, ModelSettings]] = []
    for model in candidates:
        if not _is_model(model, _THINKING_BOUND):
            continue
        # A `FallbackModel` prepares the messages for each of its models as it sends to it.
        prepared = model.prepare_messages(list(messages), parameters) if fallback else messages
        if not _unsigned_tool_loop(prepared, model.system):
            continue
        thinks = getattr(model, '_request_thinks', None)
        merged = merge_model_settings(model.settings, settings) or {}
        if callable(thinks) and thinks(merged, parameters):
            refused.append((model, merged))
    if not refused:
        return settings
    off: dict[str, object] = {**(settings or {}), 'thinking': False}
    if any(merged.get('anthropic_thinking') for _, merged in refused):
        # The provider's own setting wins over `thinking`, here or in the model's settings: unset (pydantic-ai reads
        # an empty one as none), so that each model sends what `thinking=False` means for it (`disabled`, or the
        # lowest setting of a model that cannot turn thinking off).
        off['anthropic_thinking'] = None
    for model, merged in refused:
        if merged.get('anthropic_effort') in _EFFORTS_NEEDING_THINKING and model.profile.get(
            'anthropic_disallows_top_effort_when_thinking_disabled', False
        ):
            # Opus 5, Sonnet 5.5 and Haiku 5.5 cap the effort at `high` with thinking off; pydantic-ai refuses to
            # send more (`UserError`). The highest they accept, for the request asking for text.
            off['anthropic_effort'] = 'high'
    return cast(ModelSettings, off)


def _unsigned_tool_loop(messages: Sequence[ModelMessage], system: str) -> bool:
    """Whether *messages* end in a tool loop whose last assistant turn does not open with a thinking block signed by
    *system* (what pydantic-ai sends as a thinking block; any other reasoning goes as text)."""
    if len(messages) < 2:
        return False
    last, previous = messages[-1], messages[-2]
    if not isinstance(last, ModelRequest) or not isinstance(previous, ModelResponse):
        return False
    # Prepared messages: a legacy tool retry (`RetryPromptPart`) is a `ToolReturnPart` by now.
    answers = any(isinstance(part, ToolReturnPart) for part in last.parts)
    if not answers or not any(isinstance(part, ToolCallPart) for part in previous.parts):
        return False
    for part in previous.parts:
        if isinstance(part, ThinkingPart):
            if part.provider_name == system and part.signature:
                return False
            continue  # sent as text, in a user turn of its own (a model that imitates its turns) or first
        if (
            isinstance(part, CompactionPart)
            or (isinstance(part, TextPart) and not part.content)
            or (isinstance(part, NativeToolCallPart | NativeToolReturnPart) and part.provider_name != system)
        ):
            continue  # not sent, or (a compaction block) allowed ahead of the thinking block
        return True
    return True


_TOOL_FILTERING = frozenset({'AnthropicModel', 'GoogleModel'})
"""Model classes that send a `tool_choice` restricted to some tools by leaving the others out of the request."""

_THINKING_BOUND = frozenset({'AnthropicModel'})
"""Model classes whose thinking must open the assistant turn of a running tool loop with a block they signed.

`BedrockConverseModel` is not among them, though Claude on Bedrock is bound by the same rule (Bedrock relays the
same 400): its thinking may be set in `bedrock_additional_model_requests_fields`, which `thinking=False` does not
override, and it is not handled here."""

_EFFORTS_NEEDING_THINKING = frozenset({'xhigh', 'max'})
"""Anthropic efforts that the models flagged `anthropic_disallows_top_effort_when_thinking_disabled` refuse with
thinking off."""


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


def sent_prefix(view: ConversationView, stays: Callable[[Exchange], bool]) -> list[ModelMessage]:
    """The conversation without its newest exchanges for which *stays* holds (those after the last one it fails).

    What stays verbatim after a compaction need not be in the compactor's request. Left out from the end,
    it leaves what the agent already sent (in a tool loop, its previous request), which a provider's
    prompt cache can serve whole; the newest results are then written to the cache once, by the agent's
    next request, instead of once more by the compactor's. Earlier messages are the same objects.
    """
    exchanges = view.exchanges
    cut = len(exchanges)
    while cut and stays(exchanges[cut - 1]):
        cut -= 1
    if cut == len(exchanges):
        return list(view.messages)
    if cut == 0:
        return []
    start, _ = exchanges[cut].refs[0]
    out = list(view.messages[:start])
    # The message the first left-out exchange starts in can open with parts of earlier exchanges (a
    # request holding the last tool results and a new prompt): those parts are sent.
    earlier: list[int] = []
    for exchange in reversed(exchanges[:cut]):
        touching = [parts for index, parts in exchange.refs if index == start]
        if not touching:
            break
        for parts in touching:
            earlier.extend(parts if parts is not None else range(len(view.messages[start].parts)))
    if earlier:
        out.append(fragment(view.messages, (start, tuple(sorted(set(earlier))))))
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
