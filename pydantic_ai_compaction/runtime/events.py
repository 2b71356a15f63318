"""Events: an OpenTelemetry span per compaction and a callback for observers (evals, logs).

The span (`SPAN_NAME`) is opened on the run's tracer before a compaction starts and closed when it ends, so
its duration is the compaction's and the compactor's own model calls (`runtime.compactor`) are its children.
An agent that is not instrumented has a `NoOpTracer`: then no span is opened and nothing is computed for one.

Attribute names follow the OpenTelemetry GenAI semantic conventions where one exists
(`gen_ai.conversation.id`) and use the `pydantic_ai_compaction.` namespace otherwise. Compactor usage on the
compaction span is under our namespace, not `gen_ai.usage.*`: the child model-request spans already carry
`gen_ai.usage.*`, and a backend that sums a trace's usage attributes must not count the compactor twice.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

from opentelemetry.trace import NoOpTracer, Span, Status, StatusCode, Tracer

from pydantic_ai_compaction.protocols.types import CompactionEvent
from pydantic_ai_compaction.runtime.degraded import described, warn_degraded

SPAN_NAME = 'pydantic_ai_compaction.compact'
"""Name of the span each compaction (or ignored crossing) emits."""

ATTRIBUTE_PREFIX = 'pydantic_ai_compaction.'
"""Namespace of the span attributes that have no OpenTelemetry GenAI convention."""

EventObserver = Callable[[CompactionEvent], None]
"""Receives every event a capability emits."""


def instrumented(tracer: Tracer | None) -> bool:
    """Whether *tracer* records anything: the run's tracer is a `NoOpTracer` unless the agent is instrumented."""
    return tracer is not None and not isinstance(tracer, NoOpTracer)


@contextmanager
def compaction_span(
    tracer: Tracer | None, strategy: str, *, conversation_id: str | None = None
) -> Generator[Span | None]:
    """The compaction span, current for the work inside the `with` (its model calls nest under it).

    Yields `None` when *tracer* is not recording; pass what it yields to `emit` as `span=`.
    """
    if not instrumented(tracer):
        yield None
        return
    assert tracer is not None
    attributes: dict[str, Any] = {f'{ATTRIBUTE_PREFIX}strategy': strategy}
    if conversation_id is not None:
        attributes['gen_ai.conversation.id'] = conversation_id
    with tracer.start_as_current_span(SPAN_NAME, attributes=attributes) as span:
        yield span


def record_failure(span: Span | None, error: BaseException) -> None:
    """Mark *span* as failed by *error*, which the runtime caught (compaction never fails a run)."""
    if span is not None and span.is_recording():
        try:
            span.record_exception(error)  # writes `str(error)`, which a user's exception may refuse
        except Exception:
            span.set_attribute('exception.type', type(error).__qualname__)
        span.set_status(Status(StatusCode.ERROR, f'{type(error).__name__}: {described(error, text=True)}'))


def emit(
    event: CompactionEvent,
    tracer: Tracer | None,
    observer: EventObserver | None,
    *,
    span: Span | None = None,
) -> None:
    """Record *event* on *span* (opened by `compaction_span`), or as a span of its own on *tracer*; then hand
    it to *observer*.

    *tracer* is the run's: without `span`, an instrumented run gets a short span for an event that involved no
    work (a crossing the baseline ignores).
    """
    if span is not None:
        if span.is_recording():
            span.set_attributes(_attributes(event))
    elif tracer is not None and instrumented(tracer):
        with tracer.start_as_current_span(SPAN_NAME) as own:
            if own.is_recording():
                own.set_attributes(_attributes(event))
    if observer is not None:
        try:
            observer(event)
        except Exception as error:  # an observer's bug must not fail the run it observes
            warn_degraded(f'compaction observer raised {described(error)}', stacklevel=2)


def _attributes(event: CompactionEvent) -> dict[str, Any]:
    p = ATTRIBUTE_PREFIX
    attributes: dict[str, Any] = {
        f'{p}kind': event.kind,
        f'{p}strategy': event.strategy,
        f'{p}messages_before': event.messages_before,
        f'{p}messages_after': event.messages_after,
    }
    if event.trigger_tokens is not None:
        attributes[f'{p}trigger_tokens'] = event.trigger_tokens
    if event.reason is not None:
        attributes[f'{p}reason'] = event.reason
    if event.detail is not None:
        attributes[f'{p}detail'] = event.detail
    record = event.record
    if record is not None:
        usage = record.compactor_usage
        attributes.update(
            {
                f'{p}variant': record.variant or '',
                f'{p}tokens_before': record.tokens_before,
                f'{p}tokens_after': record.tokens_after,
                f'{p}kept': list(record.kept),
                f'{p}dropped': list(record.dropped),
                f'{p}rejected': list(record.rejected),
                f'{p}fallback_reason': record.fallback_reason or '',
                f'{p}compactor.requests': usage.requests,
                f'{p}compactor.failed_attempts': usage.failed_attempts,
                f'{p}compactor.input_tokens': usage.input_tokens,
                f'{p}compactor.output_tokens': usage.output_tokens,
                f'{p}compactor.cache_read_tokens': usage.cache_read_tokens,
                f'{p}compactor.cache_write_tokens': usage.cache_write_tokens,
            }
        )
    return attributes
