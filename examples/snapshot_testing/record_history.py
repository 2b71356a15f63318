"""Record a history to snapshot-test compactions on: `result.all_messages_json()` written to a file.

In your project this is a real run of your agent, saved once. Here an offline `FunctionModel` reads six logs.

Run: `python record_history.py` (writes `tests/histories/audit.json`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

HISTORY = Path(__file__).parent / 'tests' / 'histories' / 'audit.json'


def main() -> None:
    steps = iter(range(100))

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = next(steps)
        if step < 6:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': step}, tool_call_id=f'call-{step}')])
        return ModelResponse(parts=[TextPart('inc-7')])

    agent = Agent(FunctionModel(respond), system_prompt='Audit the logs.')

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return '\n'.join(f'{index}-{n} service=api status=ok' for n in range(40))

    result = agent.run_sync('Audit logs 0-5.')
    HISTORY.parent.mkdir(parents=True, exist_ok=True)
    HISTORY.write_bytes(result.all_messages_json())
    print(f'wrote {len(result.all_messages())} messages to tests/histories/{HISTORY.name}')


if __name__ == '__main__':
    main()
