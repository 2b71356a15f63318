"""With pydantic-ai-harness: our strategies as harness tiers, driven by `compact_now`, honouring `pin()`.

Every strategy of this library is also a harness `CompactionStrategy`, so it can be a tier of
`TieredCompaction` (here: harness clears old tool output first, and our fork runs only when that is not
enough) or a link of `FallbackCompaction`, and `compact_now` compacts a recorded history once, on demand.
Content marked with harness's `pin()` is kept verbatim by every strategy.

Needs pydantic-ai-harness (`pip install "pydantic-ai-compaction[harness]"`). Runs offline on a
`FunctionModel`. Run: `python examples/harness_interop.py`.
"""

from __future__ import annotations

import asyncio
import json

from pydantic_ai import Agent
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai_harness.compaction import ClearToolResults, TieredCompaction, compact_now, pin

from pydantic_ai_compaction import Fork, StatelessSummary
from pydantic_ai_compaction.processors import FORK_MARKER

SUMMARY = {'rules': [], 'facts': ['inc-7 owner ayse'], 'progress': 'logs read', 'next_step': 'report'}
FORK_REPLY = json.dumps({'keep': [], 'summary': SUMMARY})


def auditor() -> FunctionModel:
    steps = iter(range(100))

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts
        prompt = ' '.join(p.content for p in last if isinstance(p, UserPromptPart) and isinstance(p.content, str))
        if FORK_MARKER in prompt:
            return ModelResponse(parts=[TextPart(FORK_REPLY)])
        if '[pydantic-ai-compaction' in prompt:
            return ModelResponse(parts=[TextPart('Logs 0-5 read; inc-7 owner ayse.')])
        step = next(steps)
        if step < 8:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': step})])
        return ModelResponse(parts=[TextPart('INC-7')])

    return FunctionModel(respond)


def boundaries(messages: list[ModelMessage]) -> list[str]:
    """The strategy of each compaction boundary in *messages*."""
    return [
        str((p.metadata or {}).get('pydantic_ai_compaction', {}).get('strategy'))
        for m in messages
        for p in m.parts
        if isinstance(p, CompactionPart)
    ]


async def main() -> None:
    # Harness clears old tool output first; our fork runs only when clearing does not reach the target.
    tiered = TieredCompaction(tiers=[ClearToolResults(max_tokens=1, keep_pairs=1), Fork()], target_tokens=1_000)
    agent = Agent(auditor(), capabilities=[tiered], system_prompt='Audit the logs.')

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return '\n'.join(f'{index}-{n} service=api status=ok' for n in range(300))

    result = await agent.run('Audit logs 0-7.')
    history = result.all_messages()
    print(f'tiered: answer {result.output}, {len(history)} messages, boundaries: {", ".join(boundaries(history))}')

    # `compact_now` on a recorded history, with a pinned request that must survive any compaction.
    recorded = [*history[:-1], ModelRequest(parts=[pin('Always report ids in lowercase.')]), history[-1]]
    compacted = await compact_now(StatelessSummary(), recorded, model=auditor())
    pinned = [
        p
        for m in compacted
        for p in m.parts
        if isinstance(p, UserPromptPart) and 'Always report ids in lowercase.' in str(p.content)
    ]
    print(f'compact_now: {len(recorded)} -> {len(compacted)} messages, boundaries: {", ".join(boundaries(compacted))}')
    print(f'pinned request kept: {len(pinned) == 1}')


if __name__ == '__main__':
    asyncio.run(main())
