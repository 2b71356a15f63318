"""Events: the OpenTelemetry spans of an instrumented agent's compactions, and observer callbacks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracer, StatusCode
from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.instrumented import InstrumentationSettings, InstrumentedModel
from pydantic_ai.models.test import TestModel

from pydantic_ai_compaction import (
    CompactionEvent,
    Fork,
    Native,
    NoCompaction,
    RetryPolicy,
    StatelessSummary,
    Trigger,
)
from pydantic_ai_compaction.runtime import SPAN_NAME, CompactionContext, compactor, events

from .support import ScriptedAgentModel, Unprintable, fork_json, log_text

P = events.ATTRIBUTE_PREFIX


def instrumented_agent(
    script: ScriptedAgentModel,
    capability: object,
    exporter: InMemorySpanExporter,
    *,
    include_content: bool = True,
) -> Agent[None, str]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = InstrumentationSettings(tracer_provider=provider, include_content=include_content)
    agent = Agent(script.model(), capabilities=[Instrumentation(settings=settings), capability])  # pyright: ignore[reportArgumentType]

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index)

    return agent


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def compaction_spans(spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.name == SPAN_NAME]


def test_each_compaction_emits_a_span_with_its_record() -> None:
    exporter = InMemorySpanExporter()
    events_seen: list[CompactionEvent] = []
    script = ScriptedAgentModel(logs=8, compactor=lambda messages, kind: fork_json(['g1', 'g99']))
    fork = Fork(trigger=Trigger(tokens=3_000), observer=events_seen.append)
    instrumented_agent(script, fork, exporter).run_sync('Audit.')
    spans = compaction_spans(exporter.get_finished_spans())
    compacted = [e for e in events_seen if e.kind == 'compacted']
    assert len(spans) == len(events_seen) and len(compacted) >= 3
    for span, event in zip(spans, events_seen, strict=True):
        attributes = attrs(span)
        assert attributes[f'{P}kind'] == event.kind
        assert attributes[f'{P}strategy'] == 'fork'
        if event.record is not None:
            assert attributes[f'{P}dropped'] == event.record.dropped
            assert attributes[f'{P}rejected'] == event.record.rejected == ('g99',)
            assert attributes[f'{P}compactor.output_tokens'] == 20
            assert attributes[f'{P}compactor.requests'] == 1
            assert attributes[f'{P}tokens_before'] > attributes[f'{P}tokens_after']


@pytest.mark.parametrize(
    ('capability', 'kind'),
    [
        (Fork(trigger=Trigger(tokens=3_000)), 'fork'),
        (StatelessSummary(trigger=Trigger(tokens=3_000)), 'summary'),
    ],
    ids=['fork', 'summary'],
)
def test_the_compactor_call_is_a_gen_ai_span_inside_the_compaction_span(capability: object, kind: str) -> None:
    exporter = InstrumentedExporter()
    script = ScriptedAgentModel(logs=6, compactor=lambda messages, k: fork_json(['g1']) if k == 'fork' else 'summary')
    result = instrumented_agent(script, capability, exporter).run_sync('Audit.')
    assert kind in script.calls
    spans = exporter.get_finished_spans()
    # Every compactor call happened inside a compaction span (one whose result was kept or not).
    compactions = [s for s in compaction_spans(spans) if children(spans, s)]
    assert len(compactions) == script.calls.count(kind) >= 1
    assert any(attrs(s)[f'{P}kind'] == 'compacted' for s in compactions)
    for compaction in compactions:
        (call,) = children(spans, compaction)
        attributes = attrs(call)
        assert call.name == f'chat {script.model().model_name}'
        assert attributes['gen_ai.operation.name'] == 'chat'
        assert attributes['gen_ai.request.model'] == script.model().model_name
        assert attributes['gen_ai.provider.name'] == 'function'
        assert attributes['gen_ai.usage.input_tokens'] == 100
        assert attributes['gen_ai.usage.output_tokens'] == 20
        # The compactor's reply is in the trace, as the agent's own responses are with content included.
        assert 'summary' in attributes['gen_ai.output.messages']
        # The compaction span is the real work's duration: it opens before the compactor call and closes after.
        assert compaction.start_time is not None and compaction.end_time is not None
        assert call.start_time is not None and call.end_time is not None
        assert compaction.start_time <= call.start_time <= call.end_time <= compaction.end_time
        assert compaction.context is not None and call.context is not None
        assert call.context.trace_id == compaction.context.trace_id
        if attrs(compaction)[f'{P}kind'] == 'compacted':
            assert attrs(compaction)[f'{P}compactor.input_tokens'] == 100
    # The compactor's usage counts in the run's, and its spans are not the agent's own requests.
    agent_chats = [s for s in spans if s.name.startswith('chat ') and s not in exporter.compactor_calls(spans)]
    assert len(agent_chats) == script.calls.count('agent')
    assert result.usage.requests == len(script.calls)


class InstrumentedExporter(InMemorySpanExporter):
    def compactor_calls(self, spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
        return [child for parent in compaction_spans(spans) for child in children(spans, parent)]


def test_content_is_left_out_when_the_run_leaves_it_out() -> None:
    exporter = InstrumentedExporter()
    script = ScriptedAgentModel(logs=6, compactor=lambda messages, kind: 'a private summary')
    summary = StatelessSummary(trigger=Trigger(tokens=3_000))
    instrumented_agent(script, summary, exporter, include_content=False).run_sync('Audit.')
    calls = exporter.compactor_calls(exporter.get_finished_spans())
    assert calls
    for call in calls:
        assert 'a private summary' not in repr(attrs(call))
        assert attrs(call)['gen_ai.usage.output_tokens'] == 20


def test_failed_compactor_attempts_are_error_spans_inside_the_compaction() -> None:
    exporter = InstrumentedExporter()

    def overloaded(messages: list[ModelMessage], kind: str) -> str:
        raise ModelHTTPError(503, 'function', 'overloaded')

    fork = Fork(trigger=Trigger(tokens=3_000), retry=RetryPolicy(attempts=2, initial_wait=0, max_wait=0))
    instrumented_agent(ScriptedAgentModel(logs=8, compactor=overloaded), fork, exporter).run_sync('Audit.')
    spans = exporter.get_finished_spans()
    compaction = next(s for s in compaction_spans(spans) if attrs(s)[f'{P}kind'] == 'compacted')
    attempts = children(spans, compaction)
    assert len(attempts) == 2
    assert all(a.status.status_code is StatusCode.ERROR for a in attempts)
    assert attrs(compaction)[f'{P}fallback_reason'] != ''
    assert attrs(compaction)[f'{P}compactor.failed_attempts'] == 2


def test_a_model_without_provider_compaction_gets_a_span_that_says_so_then_the_emulation() -> None:
    exporter = InstrumentedExporter()
    script = ScriptedAgentModel(logs=6, compactor=lambda messages, kind: 'emulated summary')
    instrumented_agent(script, Native(trigger=Trigger(tokens=3_000)), exporter).run_sync('Audit.')
    spans = exporter.get_finished_spans()
    compaction = next(s for s in compaction_spans(spans) if attrs(s)[f'{P}kind'] == 'compacted')
    provider, emulated = sorted(children(spans, compaction), key=lambda s: s.start_time or 0)
    assert provider.name == f'compact_messages {script.model().model_name}'
    assert attrs(provider)['gen_ai.operation.name'] == 'compact_messages'
    assert attrs(provider)[f'{P}unsupported'] is True
    assert provider.status.status_code is StatusCode.UNSET
    assert emulated.name.startswith('chat ') and attrs(emulated)['gen_ai.usage.output_tokens'] == 20


def test_without_instrumentation_the_model_is_called_as_it_is_and_no_span_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[str] = []
    original = NoOpTracer.start_as_current_span

    def spy(self: NoOpTracer, name: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(name)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(NoOpTracer, 'start_as_current_span', spy)
    script = ScriptedAgentModel(logs=6, compactor=lambda messages, kind: fork_json(['g1']))
    agent = Agent(script.model(), capabilities=[Fork(trigger=Trigger(tokens=3_000))])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index)

    agent.run_sync('Audit.')
    assert 'fork' in script.calls
    assert SPAN_NAME not in opened and not any(name.startswith(('chat', 'compact_messages')) for name in opened)

    model = TestModel()
    ctx = CompactionContext(run=_run_context(NoOpTracer()), model=model, model_settings=None, parameters=_params())
    assert compactor.traced(model, ctx) is model
    with events.compaction_span(NoOpTracer(), 'fork') as span:
        assert span is None


def test_an_instrumented_run_wraps_the_compactor_model_once() -> None:
    provider = TracerProvider()
    model = TestModel()
    ctx = CompactionContext(
        run=_run_context(provider.get_tracer('test')), model=model, model_settings=None, parameters=_params()
    )
    traced = compactor.traced(model, ctx)
    assert isinstance(traced, InstrumentedModel) and traced.wrapped is model
    assert compactor.traced(traced, ctx) is traced


def test_ignored_crossings_are_spans_too() -> None:
    exporter = InMemorySpanExporter()
    instrumented_agent(ScriptedAgentModel(logs=5), NoCompaction(trigger=Trigger(tokens=2_000)), exporter).run_sync(
        'Audit.'
    )
    spans = compaction_spans(exporter.get_finished_spans())
    assert spans and all(attrs(span)[f'{P}kind'] == 'ignored' for span in spans)
    assert all(attrs(span)[f'{P}reason'] == 'baseline' for span in spans)


def _params() -> ModelRequestParameters:
    return ModelRequestParameters()


def _run_context(tracer: Any) -> Any:
    from pydantic_ai.tools import RunContext
    from pydantic_ai.usage import RunUsage

    return RunContext(deps=None, model=TestModel(), usage=RunUsage(), tracer=tracer)


def test_a_failure_whose_error_cannot_be_written_is_an_error_span_and_fails_no_run() -> None:
    def protect(exchange: object, messages: object) -> bool:
        raise Unprintable

    exporter = InMemorySpanExporter()
    script = ScriptedAgentModel(logs=5, compactor=lambda messages, kind: fork_json([]))
    with pytest.warns(RuntimeWarning, match=r'left the history unchanged: <Unprintable: repr\(\) failed>'):
        result = instrumented_agent(script, Fork(trigger=Trigger(tokens=3_000), protect=protect), exporter).run_sync(
            'Audit.'
        )
    assert result.output == 'report: done'
    failed = [s for s in compaction_spans(exporter.get_finished_spans()) if s.status.status_code is StatusCode.ERROR]
    assert failed and all(s.status.description == 'Unprintable: <Unprintable: str() failed>' for s in failed)
