"""How capabilities reach a store during a run: under which conversation key, and off the event loop.

The key decides whose archive, notes and recall log a run can read, so it never comes from the
submitted `message_history`: pydantic-ai takes a run's `conversation_id` from the history when the
caller does not pass one, and a client that sends back a history carrying another conversation's id
would otherwise read that conversation's entries. The default key is the run itself; a key that spans
runs comes from the capability's configuration (a fixed string, or a function of the run context that
reads what the application trusts, such as its own session in `deps`).

Store calls are blocking (a locked SQLite file waits for its busy timeout, a dropped PostgreSQL
connection for a fresh one), so they run in a worker thread and the event loop keeps serving other
tasks meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
from pydantic_ai.tools import RunContext

from pydantic_ai_compaction.protocols.archive import ArchiveError
from pydantic_ai_compaction.runtime.checks import ConfigurationError, check_callable
from pydantic_ai_compaction.runtime.degraded import described, warn_degraded
from pydantic_ai_compaction.runtime.encoding import clean_text
from pydantic_ai_compaction.runtime.transcript import clip

T = TypeVar('T')

ConversationKey = str | Callable[[RunContext[Any]], str] | None
"""A fixed key, a function of the run context returning one, or `None` for the run's own key."""

RUN_SCOPE_PREFIX = 'run:'
"""The default key is this prefix and the run's id: nothing outside the run can choose it."""

MEMORY_TOOL_RETRIES = 3
"""Retries each memory tool (`context_apply`, `context_recover`, `note`, `recall`) gives a model whose arguments fail
validation: a store that fails is answered, never retried, so only a model's own mistakes use them."""


def check_conversation(owner: str, value: object) -> None:
    """Refuse a `conversation=` that is neither `None`, a non-empty string nor a function."""
    if callable(value):
        check_callable(owner, 'conversation', value, arguments=1)  # called without await, with the run context
        return
    if value is None or (isinstance(value, str) and value.strip()):
        return
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + '...'
    raise ConfigurationError(
        f'{owner}.conversation must be None, a non-empty string or a function of the run context, '
        f'got {shown} ({type(value).__name__}).'
    )


def conversation_key(ctx: RunContext[Any], conversation: ConversationKey) -> str:
    """The key a run's entries are filed under; never read from the submitted history.

    Raises:
        ArchiveError: The configured function failed or returned something other than a non-empty string.
    """
    if conversation is None:
        return f'{RUN_SCOPE_PREFIX}{ctx.run_id or "default"}'
    if isinstance(conversation, str):
        return conversation
    try:
        key = conversation(ctx)
    except Exception as error:
        raise ArchiveError(
            f'the conversation key function failed ({type(error).__name__})\n{_shown(error)}', operation='conversation'
        ) from error
    if isinstance(key, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        key = str.__str__(key)  # a plain `str`: a subclass's own methods (`__len__`, `__hash__`) are the user's
    if not isinstance(key, str) or not key:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ArchiveError(
            f'the conversation key function returned {type(key).__name__}, not a non-empty string\n'
            f'it returned {clip(described(key), 200)}',
            operation='conversation',
        )
    return key


def _shown(error: BaseException) -> str:
    """*error* as the user reads it in a warning (`Type: text`, clipped): on the second line of an `ArchiveError`
    built from the user's code, which the model is not shown (`short_error` keeps the first)."""
    return clip(f'{type(error).__name__}: {described(error, text=True)}', 500)


async def call_store(operation: str, function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` in a worker thread; any failure is an `ArchiveError`.

    The stores of this package raise only `ArchiveError`; a store of your own may raise anything, and
    that must not end the run either.
    """
    try:
        return await anyio.to_thread.run_sync(partial(function, *args))
    except ArchiveError as error:
        readable = readable_error(error, operation)
        if readable is error:
            raise
        raise readable from error
    except Exception as error:
        # A store of your own may put anything in its error (a path, a query, a DSN): the model is told the kind
        # only, the warning the whole of it.
        raise ArchiveError(
            f'archive store: {operation} failed ({type(error).__name__})\n{_shown(error)}', operation=operation
        ) from error


def unreadable_answer(operation: str, error: Exception) -> ArchiveError:
    """The `ArchiveError` of a store's answer a memory tool cannot read (a store of your own returning an object
    of another type than its method's): said as a failure of that operation, which it is."""
    return ArchiveError(
        f'archive store: {operation} returned what cannot be read ({type(error).__name__})\n{_shown(error)}',
        operation=operation,
    )


def readable_error(error: ArchiveError, operation: str) -> ArchiveError:
    """*error*, or, when a store's own `ArchiveError` cannot be read as the tools and warnings read it (its `str`
    raises, or it skipped `ArchiveError.__init__`), one that says it by its type and keeps what it says of itself
    (`setup`, `reported`, `target`)."""
    if _sound(error):
        return error
    return ArchiveError(
        f'archive store: {operation} failed ({type(error).__name__})\n{_shown(error)}',
        operation=operation,
        target=_attribute(error, 'target', str) or '',
        setup=bool(_attribute(error, 'setup', bool)),
        reported=bool(_attribute(error, 'reported', bool)),
    )


def _sound(error: ArchiveError) -> bool:
    """Whether *error* can be read as the tools and warnings read it: its text written (`str` does not raise) and
    the fields `ArchiveError.__init__` sets present, of their types."""
    try:
        str(error)
    except Exception:
        return False
    return all(
        _attribute(error, name, kind) is not None
        for name, kind in (('operation', str), ('setup', bool), ('reported', bool))
    )


def _attribute(error: ArchiveError, name: str, kind: type) -> Any:
    """*error*'s field *name* when it is a *kind*, else `None` (missing, of another type, or raising)."""
    try:
        value = getattr(error, name)
    except Exception:
        return None
    return value if isinstance(value, kind) else None


def tool_failed(what: str, error: ArchiveError) -> str:
    """Warn the user that a memory tool's store call failed (*what* the tool could not do, then the whole error),
    unless the store reported the failure already; the short error the tool tells the model.

    The tool answers the model rather than failing the run: without the warning, a store that fails on every call
    would be known to the model only.
    """
    if not error.reported:  # a setup mistake or an unreachable server: reported once, by the store
        warn_degraded(f'{what}: {error}', stacklevel=3)
    return short_error(error)


def short_error(error: ArchiveError, limit: int = 300) -> str:
    """The error's first line, clipped: what a tool tells the model (no traceback, no server detail, nothing the
    user's own code raised: that is on the lines after)."""
    text = clean_text(str(error)).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return first if len(first) <= limit else first[: limit - 1] + '…'
