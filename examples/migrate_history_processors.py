"""Migrating a pydantic-ai 1.x `history_processors=` function to 2.x.

pydantic-ai 2.x removed `Agent(history_processors=...)`: history processing is a capability. Your function
moves unchanged into pydantic-ai's `ProcessHistory` capability. A function that slices the history by
message count can cut a tool call from its return; pydantic-ai repairs that for the request it sends but
saves the cut history. A compaction strategy from this library, on a message-count trigger, keeps every
call with its return, keeps the opening request, and leaves a record of what it removed.

Runs offline on a `FunctionModel`. Run: `python examples/migrate_history_processors.py`.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability, ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import ResetToCheckpoint, Trigger
from pydantic_ai_compaction.runtime import pairing_problems


# The 1.x processor, unchanged: keep the newest five messages.
async def keep_recent_messages(messages: list[ModelMessage]) -> list[ModelMessage]:
    return messages[-5:] if len(messages) > 5 else messages


def reader() -> FunctionModel:
    steps = iter(range(100))

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = next(steps)
        if step < 6:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': step}, tool_call_id=f'call-{step}')])
        return ModelResponse(parts=[TextPart('done')])

    return FunctionModel(respond)


def run(capability: AbstractCapability[Any]) -> list[ModelMessage]:
    agent = Agent(reader(), capabilities=[capability], system_prompt='Read the logs.')

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return '\n'.join(f'{index}-{n} service=api status=ok' for n in range(200))

    return agent.run_sync('Read logs 0-5.').all_messages()


def main() -> None:
    # 1.x: Agent(model, history_processors=[keep_recent_messages]). In 2.x that keyword is gone:
    try:
        Agent(reader(), history_processors=[keep_recent_messages])  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    except TypeError:
        print('history_processors=: TypeError in pydantic-ai 2.x')

    # 2.x, the same function: pydantic-ai's ProcessHistory capability.
    history = run(ProcessHistory(keep_recent_messages))
    print(
        f'ProcessHistory(keep_recent_messages): {len(history)} messages, '
        f'opening request kept: {history[0].parts[0].part_kind == "system-prompt"}, '
        f'unpaired tool calls/returns: {len(pairing_problems(history))}'
    )

    # 2.x with this library: a strategy on a message-count trigger.
    history = run(ResetToCheckpoint(trigger=Trigger(messages=6)))
    print(
        f'ResetToCheckpoint(trigger=Trigger(messages=6)): {len(history)} messages, '
        f'opening request kept: {history[0].parts[0].part_kind == "system-prompt"}, '
        f'unpaired tool calls/returns: {len(pairing_problems(history))}'
    )


if __name__ == '__main__':
    main()
