"""The runtime path of views and memory: every request they project and every log they rewrite is checked here.

Strategies propose a layout and the engine applies it. Views and memory build their own message
lists (a selection, a cleared request, a stubbed result, a step without its thinking), so they hand
them to this module instead of sending or saving them directly. Both functions hold them to the same
rules the engine holds a compaction to (provider shape and tool call/return pairing, through
`shape.shape_problems`); a rewrite of the persisted log must also keep every message and every part
except those its capability's contract lets it drop. A violation never fails the run: the request
goes out unprojected (the log stays as it was), with a warning and an `ignored` event naming the
owner, exactly as a strategy's rejected compaction does. A projection that changed the request
leaves a `compacted` event with a `CompactionRecord` naming the owner and the reason.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import compress, count
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import NoOpTracer, Tracer
from pydantic_ai.messages import (
    BaseToolCallPart,
    BaseToolReturnPart,
    CompactionPart,
    ModelMessage,
    RetryFeedbackPart,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
)
from pydantic_ai.tools import RunContext

from pydantic_ai_compaction.protocols.types import CompactionEvent, CompactionRecord, CompactorUsage
from pydantic_ai_compaction.runtime import shape
from pydantic_ai_compaction.runtime.degraded import SetupWarning, described, warn_degraded
from pydantic_ai_compaction.runtime.events import EventObserver, emit
from pydantic_ai_compaction.runtime.pairing import dangling_calls, unanswered_problem
from pydantic_ai_compaction.runtime.tokens import estimate_token_count

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

_REWRITE_NUMBERS = count(1)
_rewrite_generation = 0


def rewrites_accepted() -> int:
    """A number that changes whenever `rewrite_log` or `rewrite_log_at` accepts a rewrite, in any run of this process.

    A memo that remembers a history's messages by position and looks only at its ends to tell an extension
    from a replaced history cannot see a rewrite that swapped one message for one in the middle (`Archive`'s
    stub for an older result): when this number changed since it last looked, it compares every message.
    """
    return _rewrite_generation


PROJECTION_BOUNDARY = ''
"""`CompactionRecord.boundary_id` of a projection: it writes no boundary into the persisted log."""


def project_request(
    original: Sequence[ModelMessage],
    projected: Sequence[ModelMessage],
    owner: str,
    *,
    reason: str,
    tracer: Tracer | None = None,
    observer: EventObserver | None = None,
    checker: shape.ShapeCheck | None = None,
) -> list[ModelMessage]:
    """The request to send: *projected* when it keeps the provider shape, else *original*.

    Args:
        original: The request as it arrived (what is sent when the projection is refused).
        projected: What *owner* would send instead.
        owner: The capability's name, for the warning, the event and the record.
        reason: What the projection did (`selection`, `cleared`, `reminder`, ...), for the record.
        tracer: The run's tracer; the event becomes a span when it records.
        observer: Called with the event.
        checker: The owner's per-run `ShapeCheck`, which scans only what follows the request it checked
            last (the same problems as `shape_problems`, found without re-reading an unchanged prefix).
    """
    # The warning names this function's caller, as it did when the check was written here.
    if _accepted_projection(original, projected, owner, reason, tracer, observer, checker, unchanged=False, level=4):
        return list(projected)
    return list(original)


@dataclass(frozen=True)
class Unchanged:
    """What a view's `build` returns (see `project`) when its projection is the request as it arrived: the request's
    messages, the same objects in the same order.

    The projection is checked as any other, and the request then goes out as it arrived, without a copy of its
    messages: a view that sends a history whole (one within its budget, a long tool loop) costs no step per message.
    """

    messages: Sequence[ModelMessage]
    """The request's messages in a sequence nothing changes afterwards (a tuple): the owner's `ShapeCheck` may hold
    it to compare the next request with."""


def _accepted_projection(
    original: Sequence[ModelMessage],
    projected: Sequence[ModelMessage],
    owner: str,
    reason: str,
    tracer: Tracer | None,
    observer: EventObserver | None,
    checker: shape.ShapeCheck | None,
    *,
    unchanged: bool,
    level: int = 3,
) -> bool:
    """Whether *projected* may be sent in place of *original*: checked, refused with a warning and an event, or
    reported when it changed the request (never when *unchanged*: it holds *original*'s messages).

    *level* is the warning's `stacklevel` counted from `_refuse`: 3 names this function's caller."""
    if checker is not None:
        problems = checker.problems(projected, before=original)
    else:
        problems = shape.shape_problems(projected, before=original)
    if problems:
        problems = _not_already(problems, original)
    if problems:
        _refuse(owner, 'sent the request unprojected', problems, original, tracer, observer, level=level)
        return False
    if not unchanged and _observed(tracer, observer) and _changed(original, projected):
        _report(owner, reason, original, projected, tracer, observer)
    return True


def _not_already(problems: list[str], original: Sequence[ModelMessage]) -> list[str]:
    """*problems* less those of the calls the request as it arrived leaves without a result too.

    pydantic-ai leaves such a call in the saved history when a capability rejects the response that made it
    (`ModelRetry` from its `after_model_request`), and gives it a result before sending (and at the next run's
    start): a state of its own, not a history another capability broke. Held against a projection, it had every
    projection of the run's later requests refused, compaction stopped and a warning at each request; refusing
    would send the request as it arrived, with the same call. Other problems the request arrived with (an orphaned
    result: a capability before this one dropped a call) are still held against it. Read only when a projection has
    a problem, so never at a request whose projection has none.
    """
    dangling = {_unplaced(unanswered_problem(call_id, 0)) for call_id in dangling_calls(original)}
    return [problem for problem in problems if _unplaced(problem) not in dangling]


def _unplaced(problem: str) -> str:
    """A pairing problem without the position it names (`... (message 7)`): a projection moves messages."""
    return problem.rsplit(' (message ', 1)[0]


def rewrite_log(
    original: Sequence[ModelMessage],
    rewritten: Sequence[ModelMessage],
    owner: str,
    *,
    reason: str,
    may_drop: tuple[type[Any], ...] = (),
    tracer: Tracer | None = None,
    observer: EventObserver | None = None,
) -> list[ModelMessage] | None:
    """*rewritten* when it may replace the persisted log *original*, else `None` (keep the log as it was).

    A rewrite keeps every message, in order and of the same role, and every part of it with its kind and
    tool call id: only contents and metadata change, and only parts of a type in *may_drop* (the
    capability's contract, e.g. `ThinkingPart` for `ForgetReasoning`) may go. It may add no shape problem;
    one the log already had (a dangling call) is not held against it.

    Args:
        original: The persisted log.
        rewritten: What *owner* would save instead.
        owner: The capability's name, for the warning, the event and the record.
        reason: What the rewrite did (`numbered`, `archived`, `reasoning`, ...), for the record.
        may_drop: Part types the owner's contract lets it remove.
        tracer: The run's tracer; the event becomes a span when it records.
        observer: Called with the event.
    """
    problems = _with_shape(log_problems(original, rewritten, may_drop), original, lambda: rewritten, may_drop)
    if problems:
        _refuse(owner, 'left the history as it was', problems, original, tracer, observer)
        return None
    _accepted()
    if _observed(tracer, observer):
        _report(owner, reason, original, rewritten, tracer, observer)
    return list(rewritten)


def rewrite_log_at(
    log: list[ModelMessage],
    changes: Mapping[int, ModelMessage],
    owner: str,
    *,
    reason: str,
    may_drop: tuple[type[Any], ...] = (),
    tracer: Tracer | None = None,
    observer: EventObserver | None = None,
) -> bool:
    """Write *changes* (position → new message) into the persisted *log* when `rewrite_log` would accept them.

    `rewrite_log` for an owner that knows which positions it changed: the same rule, the same refusal and
    the same event, but only the changed positions are checked (every other message stays the log's own
    object) and they are written in place, so a request costs what it changed, not the length of the log.

    Args:
        log: The persisted log (`RunContext.messages`); changed in place when the rewrite is accepted.
        changes: What *owner* would save instead of the log's message at each position.
        owner: The capability's name, for the warning, the event and the record.
        reason: What the rewrite did (`numbered`, `archived`, `reasoning`, ...), for the record.
        may_drop: Part types the owner's contract lets it remove.
        tracer: The run's tracer; the event becomes a span when it records.
        observer: Called with the event.

    Returns:
        Whether *log* now holds the changes (`False`: it is as it was, and the refusal was reported).
    """
    if not changes:
        return True
    problems = _with_shape(change_problems(log, changes, may_drop), log, lambda: _written(log, changes), may_drop)
    if problems:
        _refuse(owner, 'left the history as it was', problems, log, tracer, observer)
        return False
    _accepted()
    before = list(log) if _observed(tracer, observer) else None
    for index, message in changes.items():
        log[index] = message
    if before is not None:
        _report(owner, reason, before, log, tracer, observer)
    return True


def rewritten_request(
    request: Sequence[ModelMessage],
    log: Sequence[ModelMessage],
    replaced: Mapping[int, tuple[ModelMessage, ModelMessage]],
) -> list[ModelMessage]:
    """The request to send after an accepted rewrite of *log*: *request* showing it, or else the log itself.

    The request a hook receives may already be projected by a capability listed before it (a selection, a
    request-only note). It is kept, with each replaced message (`(old, new)` by log position) shown as *new*: at
    that position when *old* (or *new*) is there (a request that was not projected), else wherever the
    projection put it. An older message the request does not hold stays as the projection decided: it left the
    message out (a selection within its budget) or sent its own copy of it, and sending the whole log instead
    would undo that projection for a rewrite it does not need. Only when the projection rebuilt the log's last
    message, which every request sends, is the request the rewritten log, as sent when no capability projects.
    """
    out = list(request)
    for index, (old, new) in replaced.items():
        if index < len(out) and (out[index] is old or out[index] is new):
            # Not projected there (or the request is the log's own list, which the rewrite already changed).
            out[index] = new
            continue
        found = False
        for position, message in enumerate(out):
            if message is old:
                out[position] = new
                found = True
        if not found and index == len(log) - 1:
            return list(log)
    return out


def _written(log: Sequence[ModelMessage], changes: Mapping[int, ModelMessage]) -> list[ModelMessage]:
    # A position outside the log is already a problem of its own: the shape is walked over the others.
    out = list(log)
    for index, message in changes.items():
        if 0 <= index < len(out):
            out[index] = message
    return out


def _with_shape(
    problems: list[str],
    original: Sequence[ModelMessage],
    rewritten: Callable[[], Sequence[ModelMessage]],
    may_drop: tuple[type[Any], ...],
) -> list[str]:
    """*problems* (the log rule's) and the shape problems the rewrite adds, when they may differ from the log's."""
    if not problems and _keeps_structure(may_drop):
        # Every message keeps its role and every call, return, retry and compaction item stays where it was:
        # the rewrite has the persisted log's shape, so it can add no shape problem and is not walked again
        # (an O(history) walk on every request the owner rewrites).
        return problems
    # Only what the rewrite adds: a log that already broke a rule (a call left dangling by an interrupted step)
    # may still be rewritten, as on the path above, where its shape is the persisted log's.
    existing = set(shape.shape_problems(original, before=original))
    return [*(p for p in shape.shape_problems(rewritten(), before=original) if p not in existing), *problems]


def _accepted() -> None:
    global _rewrite_generation
    # `next` hands out each number once even across threads, so a reader never sees an old value come back.
    _rewrite_generation = next(_REWRITE_NUMBERS)


def log_problems(
    original: Sequence[ModelMessage], rewritten: Sequence[ModelMessage], may_drop: tuple[type[Any], ...] = ()
) -> list[str]:
    """Every way *rewritten* loses or reorders what the persisted log *original* holds; empty when none."""
    if len(original) != len(rewritten):
        return [f'{len(original)} messages became {len(rewritten)}']
    problems: list[str] = []
    # Only the messages that are not the very same objects are compared (most of a log, on each request, is
    # the same): the positions are found in C, so an unchanged prefix costs no Python step per message.
    changed = compress(count(), map(operator.is_not, original, rewritten))
    for index in changed:
        problems.extend(_message_problems(index, original[index], rewritten[index], may_drop))
    return problems


def change_problems(
    log: Sequence[ModelMessage], changes: Mapping[int, ModelMessage], may_drop: tuple[type[Any], ...] = ()
) -> list[str]:
    """`log_problems` of *log* against *log* with *changes* (position → new message) written in.

    Every other message is the log's own object, so only the changed positions are read: the check costs
    what the rewrite changed, not the length of the log.
    """
    problems: list[str] = []
    size = len(log)
    for index in sorted(changes):
        if not 0 <= index < size:
            # A position past either end would add or insert a message: the rewrite must keep the count.
            problems.append(f'message {index} is not in the log of {size} messages')
            continue
        problems.extend(_message_problems(index, log[index], changes[index], may_drop))
    return problems


def _message_problems(
    index: int, before: ModelMessage, after: ModelMessage, may_drop: tuple[type[Any], ...]
) -> list[str]:
    """How *after*, in place of the log's message *before* at *index*, breaks the log rule; empty when it does not."""
    if before is after or before.parts is after.parts:
        return []
    if type(before) is not type(after):
        return [f'message {index} changed from {type(before).__name__} to {type(after).__name__}']
    problems: list[str] = []
    kept = [_identity(part) for part in before.parts if not isinstance(part, may_drop)]
    now = [_identity(part) for part in after.parts if not isinstance(part, may_drop)]
    if kept != now:
        problems.append(f'message {index} lost or reordered parts')
    if before.parts and not after.parts:
        # Providers refuse an empty turn, and the log would send it on every later request.
        problems.append(f'message {index} lost all its parts')
    return problems


_STRUCTURE: tuple[type[Any], ...] = (
    BaseToolCallPart,
    BaseToolReturnPart,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
    RetryFeedbackPart,
    CompactionPart,
)
"""Part types the provider shape rules read (pairing, and a compaction item between responses)."""


def _keeps_structure(may_drop: tuple[type[Any], ...]) -> bool:
    """Whether a rewrite that may drop only *may_drop* parts keeps every part the shape rules read."""
    return not any(issubclass(kind, read) or issubclass(read, kind) for kind in may_drop for read in _STRUCTURE)


def _identity(part: object) -> tuple[str, str]:
    # `tool_call_id` names the call a part makes or answers; a rewrite must keep every one in place.
    call_id: object = getattr(part, 'tool_call_id', '')
    return type(part).__name__, call_id if isinstance(call_id, str) else ''


def _changed(original: Sequence[ModelMessage], projected: Sequence[ModelMessage]) -> bool:
    return len(original) != len(projected) or any(a is not b for a, b in zip(original, projected, strict=True))


def _observed(tracer: Tracer | None, observer: EventObserver | None) -> bool:
    # Views run before every request: the record's token estimates are paid only when someone reads them.
    return observer is not None or (tracer is not None and not isinstance(tracer, NoOpTracer))


def _refuse(
    owner: str,
    outcome: str,
    problems: list[str],
    original: Sequence[ModelMessage],
    tracer: Tracer | None,
    observer: EventObserver | None,
    *,
    level: int = 3,
) -> None:
    detail = '; '.join(problems[:3])
    warnings.warn(f'{owner} {outcome}: it would break the history ({detail}).', RuntimeWarning, stacklevel=level)
    event = CompactionEvent(
        'ignored', owner, None, None, len(original), len(original), reason='shape', detail='; '.join(problems[:5])
    )
    emit(event, tracer, observer)


def _report(
    owner: str,
    reason: str,
    before: Sequence[ModelMessage],
    after: Sequence[ModelMessage],
    tracer: Tracer | None,
    observer: EventObserver | None,
) -> None:
    record = projection_record(owner, reason, before, after)
    emit(
        CompactionEvent('compacted', owner, None, record, len(before), len(after), tuple(after), reason=reason),
        tracer,
        observer,
    )


def projection_record(
    owner: str,
    reason: str,
    before: Sequence[ModelMessage],
    after: Sequence[ModelMessage],
) -> CompactionRecord:
    """The record of a projection or rewrite: the owner, why, and the sizes; no boundary, no exchange ids."""
    return CompactionRecord(
        strategy=owner,
        variant=None,
        boundary_id=PROJECTION_BOUNDARY,
        next_id=0,
        sequence=0,
        tokens_before=estimate_token_count(list(before)),
        tokens_after=estimate_token_count(list(after)),
        trigger_tokens=None,
        kept=(),
        dropped=(),
        rejected=(),
        fallback_reason=None,
        detail=reason,
        compactor_usage=CompactorUsage(),
    )


async def project(
    owner: str,
    ctx: RunContext[Any],
    request_context: ModelRequestContext,
    build: Callable[[], Awaitable[Sequence[ModelMessage] | Unchanged]],
    *,
    reason: str,
    observer: EventObserver | None = None,
    checker: shape.ShapeCheck | None = None,
) -> ModelRequestContext:
    """*request_context* with the messages *build* projects, checked as `project_request` checks them (with *checker*).

    What a view's `before_model_request` returns. An exception in *build* never fails the run: the
    request goes out as it arrived, with a warning and an `ignored` event (reason `error`). When *build*
    returns `Unchanged`, its messages are checked the same way and *request_context* itself is returned
    (the request as it arrived, which is what the projection holds, whether it was accepted or refused).
    """
    original = request_context.messages
    try:
        projected = await build()
    except SetupWarning:
        raise  # a setup mistake the filters made an error ends the run, as in a strategy's hook
    except Exception as error:  # a view must never fail the run: send the request unprojected
        never_fails(owner, error)
        event = CompactionEvent(
            'ignored', owner, None, None, len(original), len(original), reason='error', detail=described(error)[:500]
        )
        emit(event, ctx.tracer, observer)
        return request_context
    unchanged = isinstance(projected, Unchanged)
    messages = projected.messages if isinstance(projected, Unchanged) else projected
    # One call for both kinds of projection: a refusal warns from this line either way, so the `default` warning
    # filter shows a refusal's text once whether or not the projection was the request itself.
    accepted = _accepted_projection(
        original, messages, owner, reason, ctx.tracer, observer, checker, unchanged=unchanged
    )
    if unchanged:
        return request_context
    return replace(request_context, messages=list(messages if accepted else original))


def never_fails(owner: str, error: Exception, outcome: str = 'sent the request unprojected') -> None:
    """Report *error* raised while *owner* built a change; the caller then goes on as if it made none."""
    warn_degraded(f'{owner} {outcome}: {described(error)}', stacklevel=3)
