"""The docs' Python blocks run: strategies.md in order in one namespace, the runtime and architecture examples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage

DOCS = Path(__file__).parent.parent / 'docs'


def python_blocks(path: Path) -> list[str]:
    return re.findall(r'```python\n(.*?)```', path.read_text(), re.DOTALL)


def test_strategy_examples_run() -> None:
    blocks = python_blocks(DOCS / 'strategies.md')
    assert len(blocks) >= 8
    namespace: dict[str, object] = {'__name__': 'docs_strategies'}
    for block in blocks:
        exec(compile(block, str(DOCS / 'strategies.md'), 'exec'), namespace)


def test_runtime_example_strategy_runs() -> None:
    import asyncio

    from pydantic_ai.models.test import TestModel

    from pydantic_ai_compaction.testing import replay

    from .support import recorded_history

    namespace: dict[str, object] = {'__name__': 'docs_runtime'}
    exec(compile(python_blocks(DOCS / 'runtime.md')[-1], 'runtime.md', 'exec'), namespace)
    strategy = namespace['KeepNewest']()  # pyright: ignore[reportCallIssue]
    out = asyncio.run(replay(strategy, recorded_history(), model=TestModel()))  # pyright: ignore[reportArgumentType]
    boundary = next(p for m in out for p in m.parts if getattr(p, 'part_kind', '') == 'compaction')
    assert boundary.content == '4 exchanges removed.'  # pyright: ignore[reportAttributeAccessIssue]


def _shape(messages: list[ModelMessage]) -> list[str]:
    """`request:` / `response:` and the kind (and tool call id) of each part, one string per message."""
    out: list[str] = []
    for message in messages:
        parts = [f'{part.part_kind}{getattr(part, "tool_call_id", "") or ""}' for part in message.parts]
        out.append(f'{message.kind}:{",".join(parts)}')
    return out


OPENING = 'request:system-prompt,user-prompt'
BOUNDARY = 'request:compaction'
RESULT = ('response:tool-call', 'request:tool-return')


@pytest.mark.parametrize(
    ('n', 'history', 'compacted'),
    [
        # n=0 keeps nothing droppable: each crossing drops what the previous step read, and its boundary
        # replaces the one before (supersedes=): one boundary however many compactions.
        (0, [OPENING, BOUNDARY, 'response:tool-callc3', 'request:tool-returnc3'], 3),
        (
            1,
            [OPENING, BOUNDARY, *(f'{kind}c{i}' for i in (2, 3) for kind in RESULT)],
            2,
        ),
        # n at least the droppable count keeps everything: no boundary, no fallback.
        (
            10,
            [OPENING] + [f'{kind}c{i}' for i in range(4) for kind in ('response:tool-call', 'request:tool-return')],
            0,
        ),
    ],
)
def test_architecture_keep_last_example_runs_in_an_agent(n: int, history: list[str], compacted: int) -> None:
    from pydantic_ai_compaction import CompactionEvent, Trigger

    from .support import ScriptedAgentModel, audit_agent

    namespace: dict[str, object] = {'__name__': 'docs_architecture'}
    # `dont_inherit`: the block runs as a user's module would, without this file's `from __future__` flags.
    block = python_blocks(DOCS / 'architecture.md')[-1]
    exec(compile(block, 'architecture.md', 'exec', dont_inherit=True), namespace)
    events: list[CompactionEvent] = []
    strategy = namespace['KeepLast'](n=n, trigger=Trigger(tokens=1_500), observer=events.append)  # pyright: ignore[reportCallIssue]
    result = audit_agent(ScriptedAgentModel(logs=4), [strategy]).run_sync('Audit logs 0-3.')
    assert _shape(result.all_messages()) == [*history, 'response:text']
    done = [event for event in events if event.kind == 'compacted']
    assert len(done) == compacted
    assert all(event.record is not None and event.record.fallback_reason is None for event in done)
    if n >= 4:
        assert [event.reason for event in events] == ['nothing to drop', 'declined', 'declined', 'declined']
