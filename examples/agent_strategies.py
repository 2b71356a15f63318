"""Registering compaction strategies in an agent: each strategy is a capability.

An agent reads six logs, one `read_log` call per step, then answers. Every strategy below compacts the
history when it passes 3,000 estimated tokens; the run's final history shows what each one left.
The model is a `FunctionModel`, so this runs offline: the same `capabilities=[...]` line works with any
pydantic-ai model string (`'openai:gpt-5.2'` needs the `openai` extra of pydantic-ai-slim).

Run: `python examples/agent_strategies.py`.
"""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import CompactionPart, ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import (
    CompactionCapability,
    CompactionEvent,
    Fork,
    ResetToCheckpoint,
    StatelessSummary,
    Trigger,
)
from pydantic_ai_compaction.processors import FORK_MARKER

TRIGGER = Trigger(tokens=3_000)


def last_prompt(messages: list[ModelMessage]) -> str:
    return ' '.join(
        p.content for p in messages[-1].parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)
    )


def auditor() -> FunctionModel:
    """Calls `read_log` for logs 0-5, then answers; answers compaction requests with a short summary."""
    steps = iter(range(100))

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = last_prompt(messages)
        if FORK_MARKER in prompt:  # the fork asks in the conversation itself (free variant: a KEEP line first)
            return ModelResponse(parts=[TextPart('KEEP: none\nLogs read so far; inc-7 owner ayse. Next: next log.')])
        if '[pydantic-ai-compaction' in prompt:  # the stateless summarizer's request
            return ModelResponse(parts=[TextPart('Logs read so far; inc-7 owner ayse. Next: next log.')])
        step = next(steps)
        if step < 6:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': step})])
        return ModelResponse(parts=[TextPart('INC-7 (owner ayse)')])

    return FunctionModel(respond)


def build_agent(strategy: CompactionCapability[None]) -> Agent[None, str]:
    agent = Agent(auditor(), capabilities=[strategy], system_prompt='Audit the logs.')

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return '\n'.join(f'{index}-{n} service=api status=ok' for n in range(300))

    return agent


def main() -> None:
    for name, make in (
        ('fork', lambda observer: Fork(trigger=TRIGGER, variant='free', observer=observer)),
        ('summary', lambda observer: StatelessSummary(trigger=TRIGGER, observer=observer)),
        ('reset', lambda observer: ResetToCheckpoint(trigger=TRIGGER, observer=observer)),
    ):
        events: list[CompactionEvent] = []
        result = build_agent(make(events.append)).run_sync('Audit logs 0-5.')
        compactions = [e for e in events if e.kind == 'compacted']
        history = result.all_messages()
        boundaries = sum(isinstance(p, CompactionPart) for m in history for p in m.parts)
        print(
            f'{name}: {len(compactions)} compactions, {len(history)} messages kept, '
            f'{boundaries} summary part(s), answer: {result.output}'
        )


if __name__ == '__main__':
    main()
