"""Archive + Recall on SQLite across two processes: what one process archived, another recalls and recovers.

The first process runs an agent that reads two logs and archives the first one behind a short note
(`context_apply`): the original leaves the history, the store keeps it. The second process, a new agent on
the same SQLite file and the same conversation key, finds the incident with `recall` and gets the exact
original back with `context_recover`.

The conversation key comes from your application (here a constant; in a service, a session id from `deps`),
never from the messages a client sends: see docs/archive.md. Runs offline on a `FunctionModel`.

Run: `python examples/archive_recall_sqlite.py [DATABASE]` (default: a temporary file). It starts the second
process itself, as `python examples/archive_recall_sqlite.py --second DATABASE`.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import Archive, Recall, SQLiteArchiveStore

CONVERSATION = 'audit-42'


def log_text(index: int) -> str:
    lines = [f'{index}-{n:03d} service=api status=ok' for n in range(200)]
    if index == 0:
        lines.insert(90, 'INCIDENT inc-1007 service=payments severity=2 owner=ayse')
    return '\n'.join(lines)


def scripted(calls: Sequence[ToolCallPart], answer: str) -> FunctionModel:
    """A model that makes *calls* one per step, then answers."""
    steps = iter(calls)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        call = next(steps, None)
        return ModelResponse(parts=[call] if call is not None else [TextPart(answer)])

    return FunctionModel(respond)


def build_agent(model: FunctionModel, database: Path) -> Agent[None, str]:
    store = SQLiteArchiveStore(database)
    # Archive first (it numbers results), then Recall (it indexes what is about to be sent).
    agent = Agent(
        model,
        capabilities=[Archive(store=store, conversation=CONVERSATION), Recall(store=store, conversation=CONVERSATION)],
        system_prompt='Audit the logs.',
    )

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return log_text(index)

    return agent


def first(database: Path) -> None:
    model = scripted(
        [
            ToolCallPart('read_log', {'index': 0}),
            ToolCallPart('read_log', {'index': 1}),
            ToolCallPart('context_apply', {'items': [{'result_id': 'r1', 'note': 'log 0: one incident, payments'}]}),
        ],
        'Log 0 archived.',
    )
    result = build_agent(model, database).run_sync('Audit logs 0-1.')
    stub = next(
        p.content
        for m in result.all_messages()
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.tool_name == 'read_log' and 'archived as' in str(p.content)
    )
    print(f'first process: {stub}')


def second(database: Path) -> None:
    model = scripted(
        [ToolCallPart('recall', {'query': 'inc-1007 owner'}), ToolCallPart('context_recover', {'archive_ref': 'a1'})],
        'Done.',
    )
    result = build_agent(model, database).run_sync('Who owns inc-1007?')
    returns = {
        p.tool_name: str(p.content) for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)
    }
    hit = next(line for line in returns['recall'].splitlines() if 'inc-1007' in line)
    print(f'second process, recall: {hit}')
    recovered = returns['context_recover']
    print(f'second process, recovered: {len(log_text(0))} characters, the original intact: {log_text(0) in recovered}')


def main(argv: Sequence[str]) -> None:
    if argv[:1] == ['--second']:
        second(Path(argv[1]))
        return
    with tempfile.TemporaryDirectory() as directory:
        database = Path(argv[0]) if argv else Path(directory) / 'agent.sqlite3'
        first(database)
        subprocess.run([sys.executable, __file__, '--second', str(database)], check=True)


if __name__ == '__main__':
    main(sys.argv[1:])
