"""A hybrid: `Switch` picks a strategy per compaction, `Pipeline` runs strategies in order.

The seed study found no strategy best everywhere: restating instruction changes next to provider compaction
was cheapest for the first compactions, the fork held up best on long horizons. `Switch` decides per
compaction from a small state (compactions so far, estimated tokens, run step, message count);
`Pipeline([a, b])` runs each strategy on its own trigger, on what the previous one left.

Runs offline on a `FunctionModel`. Run: `python examples/hybrid.py`.
"""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import (
    CompactionCapability,
    CompactionEvent,
    Fork,
    InstructionSources,
    Native,
    Pipeline,
    Reassert,
    ResetToCheckpoint,
    Switch,
    Trigger,
)
from pydantic_ai_compaction.processors import FORK_MARKER

TRIGGER = Trigger(tokens=3_000)
SOURCES = InstructionSources(markers=('CHANGE:',))


def auditor() -> FunctionModel:
    """Reads logs 0-7, then answers; a log marks an instruction change with `CHANGE:`."""
    steps = iter(range(100))

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts
        prompt = ' '.join(p.content for p in last if isinstance(p, UserPromptPart) and isinstance(p.content, str))
        if FORK_MARKER in prompt:
            return ModelResponse(parts=[TextPart('KEEP: none\nLogs read so far. Next: the next log.')])
        if '[pydantic-ai-compaction' in prompt:
            return ModelResponse(parts=[TextPart('Logs read so far. Next: the next log.')])
        step = next(steps)
        if step < 8:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': step})])
        return ModelResponse(parts=[TextPart('inc-7')])

    return FunctionModel(respond)


def run(strategy: CompactionCapability[None]) -> list[str]:
    """Run the audit; the strategy name of each compaction, in order (from the observers' events)."""
    EVENTS.clear()
    agent = Agent(auditor(), capabilities=[strategy], system_prompt='Audit the logs.')

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        change = 'CHANGE: report ids in lowercase\n' if index == 1 else ''
        return change + '\n'.join(f'{index}-{n} service=api status=ok' for n in range(300))

    agent.run_sync('Audit logs 0-7.')
    return [event.record.strategy for event in EVENTS if event.record is not None]


EVENTS: list[CompactionEvent] = []


def main() -> None:
    # Restate marked instruction changes after provider compaction for the first two compactions, then fork.
    hybrid = Switch(
        when=lambda state: state.compactions < 2,
        then=Reassert(Native(trigger=TRIGGER, observer=EVENTS.append), sources=SOURCES),
        otherwise=Fork(trigger=TRIGGER, variant='free', observer=EVENTS.append),
    )
    print('switch:', ', '.join(run(hybrid)))
    restated = next(e.record.restated for e in EVENTS if e.record is not None and e.record.restated)
    print('restated after native compaction:', ' | '.join(restated))
    # A cheap step first: the reset (no model call) brings the history under the fork's trigger, which spares
    # the fork's model call; the fork only runs when the reset leaves too much.
    pipeline = Pipeline(
        [
            ResetToCheckpoint(trigger=TRIGGER, observer=EVENTS.append),
            Fork(trigger=Trigger(tokens=6_000), variant='free', observer=EVENTS.append),
        ]
    )
    print('pipeline:', ', '.join(run(pipeline)))


if __name__ == '__main__':
    main()
