"""Events: an OpenTelemetry span per compaction and a callback for observers (evals, logs)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import NoOpTracer, Tracer

from pydantic_ai_compaction.protocols.types import CompactionEvent

SPAN_NAME = 'pydantic_ai_compaction.compact'
"""Name of the span each compaction (or ignored crossing) emits."""

EventObserver = Callable[[CompactionEvent], None]
"""Receives every event a capability emits."""


def emit(event: CompactionEvent, tracer: Tracer | None, observer: EventObserver | None) -> None:
    """Record *event* as a span on *tracer* (the run's, a no-op unless instrumented) and hand it to *observer*."""
    if tracer is not None and not isinstance(tracer, NoOpTracer):
        with tracer.start_as_current_span(SPAN_NAME) as span:
            if span.is_recording():
                span.set_attributes(_attributes(event))
    if observer is not None:
        try:
            observer(event)
        except Exception as error:  # an observer's bug must not fail the run it observes
            warnings.warn(f'compaction observer raised {error!r}', RuntimeWarning, stacklevel=2)


def _attributes(event: CompactionEvent) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        'compaction.kind': event.kind,
        'compaction.strategy': event.strategy,
        'compaction.messages_before': event.messages_before,
        'compaction.messages_after': event.messages_after,
    }
    if event.trigger_tokens is not None:
        attributes['compaction.trigger_tokens'] = event.trigger_tokens
    if event.reason is not None:
        attributes['compaction.reason'] = event.reason
    record = event.record
    if record is not None:
        attributes.update(
            {
                'gen_ai.conversation.compacted': True,
                'compaction.variant': record.variant or '',
                'compaction.tokens_before': record.tokens_before,
                'compaction.tokens_after': record.tokens_after,
                'compaction.kept': list(record.kept),
                'compaction.dropped': list(record.dropped),
                'compaction.rejected': list(record.rejected),
                'compaction.fallback_reason': record.fallback_reason or '',
                'compaction.compactor.input_tokens': record.compactor_usage.input_tokens,
                'compaction.compactor.output_tokens': record.compactor_usage.output_tokens,
                'compaction.compactor.requests': record.compactor_usage.requests,
            }
        )
    return attributes
