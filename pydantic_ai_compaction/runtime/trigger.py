"""The one trigger every strategy shares."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, UserPromptPart
from pydantic_ai.models import Model, ModelRequestParameters

from pydantic_ai_compaction.runtime.checks import (
    MAX_WINDOW,
    ConfigurationError,
    check_callable,
    check_int,
    check_optional_int,
    check_optional_number,
)
from pydantic_ai_compaction.runtime.degraded import SetupWarning
from pydantic_ai_compaction.runtime.segment import message_stamp, our_record
from pydantic_ai_compaction.runtime.tokens import (
    DEFAULT_CONTEXT_WINDOW,
    estimate_context_tokens,
    estimate_token_count,
    resolve_context_window,
)


@dataclass(frozen=True)
class Crossing:
    """A trigger crossing: what was measured and against which limit."""

    reason: Literal['tokens', 'messages']
    """Which limit was crossed."""

    tokens: int
    """Estimated tokens of the request about to be sent."""

    threshold: int
    """The limit that was crossed (tokens or messages, per `reason`)."""


@dataclass(frozen=True)
class Trigger:
    """When to compact: an estimated token count, a fraction of the model's window, or a message count.

    Tokens are estimated by `runtime.tokens.estimate_context_tokens` (harness's estimate, on pydantic-ai's
    public API), which anchors on the provider's reported usage of the last response and estimates only what
    came after it: ~4 characters per token, or `tokenizer`.

    Example:
        ```python
        Trigger(tokens=18_000)                        # the seed study's setting
        Trigger(fraction=0.5)                         # half of the model's window
        Trigger(fraction=0.5, context_window=128_000) # when the registry does not know the model
        Trigger(messages=200)
        Trigger(tokens=18_000, tokenizer=lambda text: len(encoding.encode(text)))  # e.g. a tiktoken encoding
        ```
    """

    tokens: int | None = None
    """Compact when the estimated request exceeds this many tokens."""

    fraction: float | None = None
    """Compact when the estimate exceeds this fraction of the model's context window, in (0, 1]."""

    context_window: int | None = None
    """Window to use with `fraction` instead of resolving it from the model."""

    messages: int | None = None
    """Compact when the history holds more than this many messages."""

    fallback_context_window: int = DEFAULT_CONTEXT_WINDOW
    """Window assumed with `fraction` when the model's window cannot be resolved."""

    tokenizer: Callable[[str], int] | None = field(default=None, compare=False)
    """Counts a string's tokens for the part of the estimate provider usage does not cover (`None`: ~4
    characters per token)."""

    def __post_init__(self) -> None:
        check_optional_int('Trigger', 'tokens', self.tokens, minimum=1)
        check_optional_number('Trigger', 'fraction', self.fraction, minimum=0, maximum=1, exclusive_minimum=True)
        check_optional_int('Trigger', 'context_window', self.context_window, minimum=1, maximum=MAX_WINDOW)
        check_optional_int('Trigger', 'messages', self.messages, minimum=1)
        check_int('Trigger', 'fallback_context_window', self.fallback_context_window, minimum=1, maximum=MAX_WINDOW)
        check_callable('Trigger', 'tokenizer', self.tokenizer, arguments=1)
        if self.tokens is None and self.fraction is None and self.messages is None:
            raise ConfigurationError('Trigger needs a limit: set `tokens`, `fraction` or `messages`.')
        if self.tokens is not None and self.fraction is not None:
            raise ConfigurationError('Trigger: set at most one of `tokens` and `fraction`.')
        if self.context_window is not None and self.fraction is None:
            raise ConfigurationError('Trigger.context_window only applies together with `fraction`.')

    @property
    def measures_tokens(self) -> bool:
        """Whether a token limit is set (a message-count trigger needs no estimate)."""
        return self.tokens is not None or self.fraction is not None

    def token_limit(self, model: Model | None, *, warn: bool = True) -> int | None:
        """The token limit for a request to *model*, or `None` when only a message limit is set.

        With `fraction` and a window that *model* does not resolve, the fallback window is assumed and a
        `SetupWarning` says so, unless *warn* is false (a second reading of the limit the trigger warned about).
        """
        if self.tokens is not None:
            return self.tokens
        if self.fraction is None:
            return None
        window = self.context_window
        if window is None and model is not None:
            window = resolve_context_window(model)
            if window is None and warn:
                _warn_unknown_window(model, self.fallback_context_window)
        return max(1, int((window or self.fallback_context_window) * self.fraction))

    def measure(self, messages: Sequence[ModelMessage], parameters: ModelRequestParameters | None = None) -> int:
        """Estimated tokens of the request *messages* would produce.

        Anchored on the last response's reported usage, except right after a compaction: a response
        kept through a compaction reported the size of the history *before* it, so until the next
        response arrives the plain estimate is used instead of that stale anchor.
        """
        if _anchor_is_stale(messages):
            return estimate_token_count(messages, self.tokenizer)
        return estimate_context_tokens(messages, self.tokenizer, model_request_parameters=parameters)

    def crossed(
        self,
        messages: Sequence[ModelMessage],
        model: Model | None,
        parameters: ModelRequestParameters | None = None,
    ) -> Crossing | None:
        """The crossing, or `None` while the history is within every limit."""
        tokens = self.measure(messages, parameters) if self.measures_tokens else 0
        return self.check(tokens, len(messages), model)

    def check(self, tokens: int, message_count: int, model: Model | None) -> Crossing | None:
        """The crossing for an already measured request, or `None` while within every limit."""
        limit = self.token_limit(model)
        if limit is not None and tokens > limit:
            return Crossing('tokens', tokens, limit)
        if self.messages is not None and message_count > self.messages:
            return Crossing('messages', tokens, self.messages)
        return None


DEFAULT_TRIGGER = Trigger(tokens=18_000)
"""The seed study's trigger (an estimated 18K tokens). Tie yours to the model's window in production."""


def _anchor_is_stale(messages: Sequence[ModelMessage]) -> bool:
    """Whether the newest response with usage predates the newest compaction (its usage is pre-compaction)."""
    anchor_id: str | None = None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if anchor_id is None:
            if isinstance(message, ModelResponse) and message.usage.input_tokens:
                if any(our_record(part) is not None for part in message.parts):
                    # A provider's compaction: its usage is the compaction call's, not this history's.
                    return True
                anchor_id = message_stamp(message)
                if anchor_id is None:
                    # Never through a compaction: its usage describes the history as it is.
                    return False
            continue
        for part in message.parts:
            record = our_record(part)
            if record is not None:
                return anchor_id in (record.get('kept') or ())
    return False


def text_tokens(text: str, tokenizer: Callable[[str], int] | None = None) -> int:
    """Estimated tokens of *text* alone, with the estimator the trigger uses (and its tokenizer, if given)."""
    return estimate_token_count([ModelRequest(parts=[UserPromptPart(text)])], tokenizer)


def _warn_unknown_window(model: Model, assumed: int) -> None:
    # A small local model (an 8k window) under a 200k assumption would overflow long before the trigger fires.
    # The message names the model, so Python's default warning filter shows it once per model, not per request.
    name = model.model_name
    if not name.startswith(f'{model.system}:'):  # a `FunctionModel`'s own name already says `function:`
        name = f'{model.system}:{name}'
    warnings.warn(
        f'Trigger(fraction=...): the context window of {name} is not known; assuming {assumed:,} tokens. '
        'Set Trigger(context_window=...) (or fallback_context_window=...) for this model.',
        SetupWarning,
        stacklevel=3,
    )
