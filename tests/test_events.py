"""Events: the OpenTelemetry span on an instrumented agent, and observer callbacks."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings

from pydantic_ai_compaction import CompactionEvent, Fork, NoCompaction, Trigger
from pydantic_ai_compaction.runtime import SPAN_NAME

from .support import ScriptedAgentModel, fork_json, log_text


def instrumented_agent(
    script: ScriptedAgentModel, capability: object, exporter: InMemorySpanExporter
) -> Agent[None, str]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentation = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
    agent = Agent(script.model(), capabilities=[instrumentation, capability])  # pyright: ignore[reportArgumentType]

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index)

    return agent


def test_each_compaction_emits_a_span_with_its_record() -> None:
    exporter = InMemorySpanExporter()
    events: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=8, compactor=lambda messages, kind: fork_json(['g1', 'g99']))
    fork = Fork(trigger=Trigger(tokens=3_000), observer=events.append)
    instrumented_agent(script, fork, exporter).run_sync('Audit.')
    spans = [span for span in exporter.get_finished_spans() if span.name == SPAN_NAME]
    compacted = [e for e in events if e.kind == 'compacted']
    assert len(spans) == len(events) and len(compacted) >= 3
    for span, event in zip(spans, events, strict=True):
        attributes = dict(span.attributes or {})
        assert attributes['compaction.kind'] == event.kind
        assert attributes['compaction.strategy'] == 'fork'
        if event.record is not None:
            assert attributes['compaction.dropped'] == event.record.dropped
            assert attributes['compaction.rejected'] == event.record.rejected
            assert attributes['compaction.compactor.output_tokens'] == 20


def test_ignored_crossings_are_spans_too() -> None:
    exporter = InMemorySpanExporter()
    instrumented_agent(ScriptedAgentModel(logs=5), NoCompaction(trigger=Trigger(tokens=2_000)), exporter).run_sync(
        'Audit.'
    )
    spans = [span for span in exporter.get_finished_spans() if span.name == SPAN_NAME]
    assert spans and all(dict(span.attributes or {})['compaction.kind'] == 'ignored' for span in spans)
