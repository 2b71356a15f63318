"""Telling a user that something degraded while the run goes on.

A store that fails, an observer that raises, a database left at an older schema: each is worked around and
reported with a `RuntimeWarning`. Under warnings made errors (`-W error`, pytest's `filterwarnings = error`)
`warnings.warn` raises, and raised from a capability's hook it ends the agent's run, which the workaround
exists to keep going. There the report goes to the `pydantic_ai_compaction` logger instead. A warning about
a mistake in the user's code (a view whose projection is refused, a misconfigured strategy) is not one of
these: it follows the filters, so a test suite that makes warnings errors fails on it. The setup mistakes a
capability's hook finds (`SetupWarning`) are raised through it; any other warning the filters make an error while
a compaction runs (one a user's `protect` or tokenizer emits) fails that compaction as any exception does.
"""

from __future__ import annotations

import logging
import warnings

from pydantic_ai.exceptions import ModelHTTPError, UserError

from pydantic_ai_compaction.protocols.archive import ArchiveError


class SetupWarning(RuntimeWarning):
    """A mistake in the agent's setup the run works around on every request (a model whose context window is
    unknown, a compactor model that cannot run). Under warnings made errors it ends the run: skipped and only logged,
    the workaround would hide it while the history grew. A store's (a PostgreSQL login refused, a database missing)
    is the exception: a store never fails a run, so there it is logged (`warn_degraded`)."""


SETUP_STATUSES = frozenset({401, 403, 404})
"""HTTP statuses a provider answers a setup mistake with: a key refused, a model the key may not use, a model
name it does not know."""


def is_setup_error(error: BaseException) -> bool:
    """Whether *error*, raised by a compactor model or a store, is a mistake in the agent's setup rather than a
    passing fault.

    An unknown model name or a missing key (pydantic-ai's `UserError`), a missing provider package, or a provider
    refusing the key or the model (`SETUP_STATUSES`): every later call fails the same way, so a fallback at each
    would hide it. A store's `ArchiveError` marked `setup` (a PostgreSQL login refused, a database missing),
    which the store has already reported once.
    """
    if isinstance(error, UserError | ImportError):
        return True
    if isinstance(error, ArchiveError):
        return getattr(error, 'setup', False) is True  # a store's own subclass may skip `ArchiveError.__init__`
    return isinstance(error, ModelHTTPError) and error.status_code in SETUP_STATUSES


def described(value: object, *, text: bool = False) -> str:
    """`repr(value)`, or `str(value)` with *text*, for a warning or an error message.

    The value is often the user's (an exception a store, a key function or an observer raised, a value a callback
    returned), and its `__repr__` or `__str__` may raise: it is then shown by its type, since a report must never
    fail the run it reports on.
    """
    try:
        return str(value) if text else repr(value)
    except Exception:
        return f'<{type(value).__name__}: {"str" if text else "repr"}() failed>'


LOGGER = logging.getLogger('pydantic_ai_compaction')
"""Where a degraded report goes when the warnings filters would make it an exception."""


def warn_degraded(message: str, *, stacklevel: int = 1, category: type[RuntimeWarning] = RuntimeWarning) -> None:
    """Warn *message* as a `RuntimeWarning`, or log it when the filters turn it into an exception.

    Args:
        message: What degraded and what was done instead.
        stacklevel: As for `warnings.warn`, counted from the caller of this function.
        category: The warning's class: `SetupWarning` for a store's setup mistake, which is reported so but,
            as every store fault, never ends the run.
    """
    try:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    except Warning:
        LOGGER.warning(message)


SHOWN_ERROR_CHARS = 500
"""Characters of an error's text a setup warning quotes (a provider's 404 body names the model it did not find)."""


def warn_if_setup_error(
    error: BaseException, subject: str, failing: str, owner: str, *, consequence: str = '', stacklevel: int = 1
) -> bool:
    """Warn with a `SetupWarning` when *error* is a mistake in the user's setup (`is_setup_error`: an unknown model
    name, a refused key, a missing provider package), not a passing fault; whether it was one.

    Every model call a component makes on the user's `model=` says so alike: `<subject>: <failing> (<error>);
    <consequence>. Check <owner>'s model=, its API key and its provider package.` Under warnings made errors the
    warning is raised, and the run ends (a strategy's) where the component lets it through.

    Args:
        error: What the model call raised.
        subject: Who reports it (a strategy's name, a class's).
        failing: What cannot be done (`the compactor cannot run`).
        owner: Whose `model=` to check (`the strategy`, a class's name).
        consequence: What happens meanwhile, if anything is worth saying.
        stacklevel: As for `warnings.warn`, counted from the caller of this function.
    """
    if not is_setup_error(error):
        return False
    shown = described(error, text=True)
    if len(shown) > SHOWN_ERROR_CHARS:
        shown = shown[: SHOWN_ERROR_CHARS - 1] + '…'
    cause = f'{type(error).__name__}: {shown}' if shown else type(error).__name__
    then = f'; {consequence}. Check' if consequence else '; check'
    warnings.warn(
        f"{subject}: {failing} ({cause}){then} {owner}'s model=, its API key and its provider package.",
        SetupWarning,
        stacklevel=stacklevel + 1,
    )
    return True
