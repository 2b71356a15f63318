"""Every Python block in docs/strategies.md runs, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

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
