"""Retry policy for the model calls compaction makes."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
)

from pydantic_ai_compaction.runtime.checks import check_int, check_number

_OVERFLOW_WORDS = (
    'context length',
    'context window',
    'context_length',
    'too long',
    'maximum context',
    'too many tokens',
)


MAX_ATTEMPTS = 100
"""Upper bound on `RetryPolicy.attempts`: compaction must end."""

MAX_WAIT = 3600.0
"""Upper bound, in seconds, on one retry wait."""


@dataclass(frozen=True)
class RetryPolicy:
    """Retries for transient errors (429, 5xx, timeouts, connection errors) on compaction calls."""

    attempts: int = 3
    """Attempts in all, the first included."""

    initial_wait: float = 0.5
    """Seconds before the first retry; later waits grow exponentially."""

    max_wait: float = 8.0
    """Upper bound on one wait, in seconds."""

    def __post_init__(self) -> None:
        # Finite bounds matter: `attempts=inf` or a NaN wait would retry a failing compactor forever.
        check_int('RetryPolicy', 'attempts', self.attempts, minimum=1, maximum=MAX_ATTEMPTS)
        check_number('RetryPolicy', 'initial_wait', self.initial_wait, minimum=0, maximum=MAX_WAIT)
        check_number('RetryPolicy', 'max_wait', self.max_wait, minimum=0, maximum=MAX_WAIT)


def is_context_overflow(error: BaseException) -> bool:
    """Whether *error* says the request did not fit the model's context window."""
    if isinstance(error, ModelContextWindowExceededError):
        return True
    if isinstance(error, ModelHTTPError) and error.status_code in (400, 413):
        text = f'{error.body} {error.provider_error_code} {error}'.lower()
        return any(word in text for word in _OVERFLOW_WORDS)
    return False


def is_transient(error: BaseException) -> bool:
    """Whether *error* is worth retrying as it is: rate limits, server errors, timeouts."""
    if is_context_overflow(error):
        return False
    if isinstance(
        error,
        ModelRateLimitError | ModelServerError | ModelUnavailableError | ModelConnectionError | ModelRequestTimeout,
    ):
        return True
    if isinstance(error, ModelHTTPError):
        return error.status_code == 429 or error.status_code >= 500
    if isinstance(error, ModelAPIError):
        return False
    return isinstance(error, TimeoutError)
