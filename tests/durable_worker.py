"""A durable (DBOS) agent with `Fork` and `Archive`, run as a process that can be killed and recovered.

`python -m tests.durable_worker DIR MODE`: the DBOS system database, the archive store and the files the
parent reads live in DIR. MODE `run` starts workflow `wf` and blocks forever inside the first model step
after the second compaction (writing `DIR/blocked` first) when `DIR/block` exists; MODE `resume` waits for
`DIR/resume` (so it can be started, and import, while the first process runs), then launches DBOS, which
recovers the interrupted workflow, and waits for it. Either way the finished history is
written to `DIR/history.json`. Every compactor call appends a line to `DIR/compactor_calls`.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pydantic_ai._utils
from dbos import DBOS, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import Archive, Fork, Trigger
from pydantic_ai_compaction.runtime.durable import DurableStore
from pydantic_ai_compaction.runtime.stores import SQLiteArchiveStore

from .support import fork_json


def _fixed_now() -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC)


# pydantic-ai stamps messages built in workflow code with the wall clock, which no replay reproduces; a
# pinned clock makes two runs comparable byte for byte. (Swapping the code object reaches the default
# factories that captured the function at import.)
pydantic_ai._utils.now_utc.__code__ = _fixed_now.__code__

WORKFLOW_ID = 'wf'
FILES = 9
"""Files the agent reads, one per step, before it answers."""


def compactions(messages: list[ModelMessage]) -> int:
    return sum(isinstance(p, CompactionPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts)


def build(directory: Path) -> Agent[None, str]:
    def compactor(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        with (directory / 'compactor_calls').open('a') as calls:
            calls.write('fork\n')
        # What the summary says depends on what was dropped, so a re-run compactor would be visible.
        last = max((int(n) for n in re.findall(r'content of file (\d+)', str(messages))), default=-1)
        return ModelResponse(parts=[TextPart(fork_json([], rules=[f'read up to file {last}']))])

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if compactions(messages) >= 2 and (directory / 'block').exists():
            (directory / 'blocked').write_text('yes')
            while True:  # the parent kills the process here, after the second compaction was recorded
                time.sleep(0.05)
        # What was read survives compaction in the summary ("read up to file N") or in recent results.
        done = [int(n) for n in re.findall(r'(?:content of|read up to) file (\d+)', str(messages))]
        step = max(done, default=-1) + 1
        if step < FILES:
            # Archive the previous result now and then: writes to the store, numbered by its counter.
            last = messages[-1].parts if isinstance(messages[-1], ModelRequest) else []
            ids = [
                found.group(1)
                for p in last
                if isinstance(p, ToolReturnPart) and p.tool_name == 'read'
                for found in [re.search(r'result (r\d+)', str(p.content))]
                if found
            ]
            if step % 4 == 3 and ids:
                item = {'result_id': ids[-1], 'note': f'file {step - 1} read'}
                return ModelResponse(
                    parts=[ToolCallPart('context_apply', {'items': [item]}, tool_call_id=f'apply{step}')]
                )
            return ModelResponse(parts=[ToolCallPart('read', {'index': step}, tool_call_id=f'read{step}')])
        prompt = [p for m in messages for p in getattr(m, 'parts', []) if isinstance(p, UserPromptPart)]
        return ModelResponse(parts=[TextPart(f'read {FILES} files after {len(prompt)} prompt(s)')])

    store = DurableStore(SQLiteArchiveStore(directory / 'archive.sqlite3'))
    agent = Agent(
        FunctionModel(respond),
        name='durable_fork',
        capabilities=[
            Archive(store=store, conversation=lambda ctx: 'durable'),
            # A compactor model of its own: its calls are journaled by runtime/durable.py.
            Fork(model=FunctionModel(compactor), trigger=Trigger(messages=8), keep_last=1),
            DBOSDurability(),
        ],
    )

    @agent.tool_plain
    def read(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'content of file {index}\n' + f'line {index}\n' * 40

    return agent


async def main(directory: Path, mode: str) -> None:
    while mode == 'resume' and not (directory / 'resume').exists():
        await asyncio.sleep(0.05)
    DBOS(config={'name': 'pac_durable', 'system_database_url': f'sqlite:///{directory / "dbos.sqlite3"}'})
    agent = build(directory)

    @DBOS.workflow(name='run_agent')
    async def run_agent(prompt: str) -> str:
        result = await agent.run(prompt)
        return result.all_messages_json().decode()

    DBOS.launch()  # recovers this executor's pending workflows
    try:
        if mode == 'run':
            with SetWorkflowID(WORKFLOW_ID):
                handle = await DBOS.start_workflow_async(run_agent, 'read the files')
        else:
            handle = await DBOS.retrieve_workflow_async(WORKFLOW_ID)
        history: str = await handle.get_result()
        (directory / 'history.json').write_text(history)
    finally:
        DBOS.destroy()


if __name__ == '__main__':
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
