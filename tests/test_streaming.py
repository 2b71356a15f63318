"""Compaction under `agent.run_stream`: the hook runs before each streamed request as before each plain one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic_ai import Agent
from pydantic_ai.messages import CompactionPart, ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from pydantic_ai_compaction import CompactionEvent, ResetToCheckpoint, StatelessSummary, Trigger
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER

from .support import last_prompt


def _streamed(capability: object) -> tuple[str, list[ModelMessage]]:
    steps = [0]

    async def reader(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        """Streams a call to `read_log` for each of 12 logs, then `done` (counted: a compaction drops the calls)."""
        step = steps[0]
        steps[0] += 1
        if step < 12:
            yield {0: DeltaToolCall(name='read_log', json_args=f'{{"index": {step}}}', tool_call_id=f'c{step}')}
        else:
            yield 'done'

    def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert SUMMARY_MARKER in last_prompt(messages)  # only the summarizer's request is not streamed
        return ModelResponse(parts=[TextPart('Read logs so far; all clean. Next: the next log.')])

    agent = Agent(FunctionModel(summarize, stream_function=reader), capabilities=[capability])  # pyright: ignore[reportArgumentType]

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return '\n'.join(f'{index:02d}-{line:03d} service=api status=ok' for line in range(200))

    async def run() -> tuple[str, list[ModelMessage]]:
        async with agent.run_stream('Audit every log.') as result:
            output = await result.get_output()
            return output, result.all_messages()

    return asyncio.run(run())


def test_a_streamed_run_compacts_under_a_message_trigger() -> None:
    events: list[CompactionEvent] = []
    output, messages = _streamed(ResetToCheckpoint(trigger=Trigger(messages=8), observer=events.append))
    assert output == 'done'
    compacted = [e for e in events if e.kind == 'compacted']
    assert len(compacted) >= 3
    checkpoints = [p.content or '' for m in messages for p in m.parts if isinstance(p, CompactionPart)]
    assert len(checkpoints) == len(compacted) and '- read_log({"index":0})' in checkpoints[0]


def test_a_streamed_summary_is_requested_without_streaming() -> None:
    events: list[CompactionEvent] = []
    output, messages = _streamed(StatelessSummary(trigger=Trigger(messages=8), observer=events.append))
    assert output == 'done'
    assert [e.record.strategy for e in events if e.kind == 'compacted' and e.record is not None][:1] == ['summary']
    assert any('all clean' in (p.content or '') for m in messages for p in m.parts if isinstance(p, CompactionPart))


def test_a_streaming_function_model_reports_one_usage_so_a_token_trigger_never_fires() -> None:
    """What docs/testing.md says: `FunctionModel`'s streamed responses report 50 input tokens each, whatever the
    history holds (12 results of 6,000 characters here), so the token trigger's anchor never grows and only one
    step's results, each under the limit here, are estimated on top of it."""
    events: list[CompactionEvent] = []
    output, messages = _streamed(ResetToCheckpoint(trigger=Trigger(tokens=3_000), observer=events.append))
    assert output == 'done' and events == []
    assert {m.usage.input_tokens for m in messages if isinstance(m, ModelResponse)} == {50}
