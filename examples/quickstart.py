"""Quickstart: six strategies on one offline tool loop, side by side.

An agent reads eight logs (about 1,500 tokens each) with one `read_log` call per step. Log 5 carries
a marked instruction change. Every strategy shares one trigger (3,000 estimated tokens); the table
shows how each one shapes the history and whether the change is still visible to the model at the
end. The "model" is a `FunctionModel` that only echoes what it can literally see, so the figures
measure information flow and cost, not the behaviour of a real LLM.

Run: `make demo` (or `python examples/quickstart.py`).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable

from pydantic_ai import Agent
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import (
    CompactionCapability,
    CompactionEvent,
    Fork,
    InstructionSources,
    Native,
    NoCompaction,
    Reassert,
    ResetToCheckpoint,
    StatelessSummary,
    Trigger,
)
from pydantic_ai_compaction.processors import FORK_MARKER, NATIVE_MARKER, SUMMARY_MARKER
from pydantic_ai_compaction.runtime.events import EventObserver
from pydantic_ai_compaction.runtime.tokens import estimate_token_count
from pydantic_ai_compaction.runtime.transcript import user_text
from pydantic_ai_compaction.testing import render

LOGS = 8
CHANGE = 'CHANGE: from now on report incident ids in lowercase'
TRIGGER = Trigger(tokens=3_000)
SOURCES = InstructionSources(markers=('CHANGE:',))


def read_log(index: int) -> str:
    """A synthetic log: noise lines, one incident, and the change in log 5."""
    lines = [f'{index:02d}-{n:04d} service=api status=ok latency={n % 97}ms' for n in range(240)]
    lines.insert(120, f'INCIDENT inc-{1000 + index} service=payments severity={index % 5 + 1} owner=team{index}')
    if index == 5:
        lines.insert(60, CHANGE)
    return '\n'.join(lines)


def visible_text(messages: list[ModelMessage], *, summaries: bool = True) -> str:
    """Everything the model can literally read in a request (earlier summaries optional)."""
    chunks: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                chunks.append(part.model_response_str())
            elif isinstance(part, UserPromptPart):
                chunks.append(user_text(part))
            elif isinstance(part, TextPart) or (summaries and isinstance(part, CompactionPart)):
                chunks.append(part.content or '')
    return '\n'.join(chunks)


def extract(text: str) -> list[str]:
    """The lines an extractive summary keeps: incidents and instruction changes."""
    return list(dict.fromkeys(re.findall(r'^.*(?:INCIDENT inc-\d+|CHANGE:).*$', text, re.MULTILINE)))


def agent_model() -> FunctionModel:
    state = {'step': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = visible_text(messages[-1:])
        if FORK_MARKER in last:
            return ModelResponse(parts=[TextPart(json.dumps(_fork_reply(messages, last)))])
        if SUMMARY_MARKER in last or NATIVE_MARKER in last:
            # Native covers the whole conversation (it replaces its earlier summaries); the
            # stateless summary only reads the exchanges it replaces.
            text = '\n'.join(extract(visible_text(messages))) or 'Nothing notable yet.'
            return ModelResponse(parts=[TextPart(text)])
        step = state['step']
        state['step'] += 1
        if step < LOGS:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': step})])
        seen = visible_text(messages)
        lowercase = CHANGE in seen
        ids = sorted(set(re.findall(r'inc-\d+', seen)))
        return ModelResponse(parts=[TextPart(', '.join(i if lowercase else i.upper() for i in ids))])

    return FunctionModel(respond)


def _fork_reply(messages: list[ModelMessage], prompt: str) -> dict[str, object]:
    # Earlier summaries stay in place, so the fork summarizes only what they do not hold.
    lines = extract(visible_text(messages, summaries=False))
    rules = [line for line in lines if 'CHANGE:' in line]
    facts = [line for line in lines if 'CHANGE:' not in line]
    return {
        'keep': [],
        'summary': {'rules': rules, 'facts': facts, 'progress': 'reading logs', 'next_step': 'next log'},
    }


STRATEGIES: dict[str, Callable[[EventObserver], CompactionCapability[None]]] = {
    'none': lambda seen: NoCompaction(trigger=TRIGGER, observer=seen),
    'native (emulated)': lambda seen: Native(trigger=TRIGGER, observer=seen),
    'summary': lambda seen: StatelessSummary(trigger=TRIGGER, observer=seen),
    'fork-json': lambda seen: Fork(trigger=TRIGGER, variant='json', observer=seen),
    'reassert+native': lambda seen: Reassert(Native(trigger=TRIGGER, observer=seen), sources=SOURCES),
    'reset': lambda seen: ResetToCheckpoint(trigger=TRIGGER, sources=SOURCES, observer=seen),
}


def describe(report: str) -> str:
    """How many incident ids a report names, and in which case."""
    ids = report.split(', ') if report else []
    case = 'lowercase' if ids and all(i.islower() for i in ids) else 'uppercase'
    return f'{len(ids)} of {LOGS} ids, {case}'


async def run(
    name: str, build: Callable[[EventObserver], CompactionCapability[None]]
) -> tuple[str, list[ModelMessage]]:
    events: list[CompactionEvent] = []
    strategy = build(events.append)
    agent = Agent(
        agent_model(), capabilities=[strategy], system_prompt='Audit the logs; report incident ids uppercase.'
    )
    agent.tool_plain(read_log)
    peak = 0

    async with agent.iter('Read logs 0-7, then report every incident id.') as agent_run:
        async for _node in agent_run:
            peak = max(peak, estimate_token_count(agent_run.ctx.state.message_history))
    result = agent_run.result
    assert result is not None
    history = result.all_messages()
    compactions = sum(1 for event in events if event.kind == 'compacted')
    row = (
        f'| {name:<18} | {result.usage.requests:>8} | {compactions:>11} | {peak:>11,} | '
        f'{estimate_token_count(history):>12,} | {result.usage.input_tokens:>10,} | {describe(result.output):<24} |'
    )
    return row, history


async def main() -> None:
    print(__doc__.split('Run:')[0].strip(), end='\n\n')
    header = ('strategy', 'requests', 'compactions', 'peak tokens', 'final tokens', 'input tok.', 'report')
    widths = (18, 8, 11, 11, 12, 10, 24)
    print('| ' + ' | '.join(f'{h:<{w}}' for h, w in zip(header, widths, strict=True)) + ' |')
    print('|' + '|'.join('-' * (w + 2) for w in widths) + '|')
    histories: dict[str, list[ModelMessage]] = {}
    for name, build in STRATEGIES.items():
        row, history = await run(name, build)
        histories[name] = history
        print(row)
    print('\nA lowercase report means the change from log 5 was still visible when the report was written;')
    print('fewer ids means incidents that left the context with nothing carrying them forward.')
    print('\nFinal history under reassert+native:\n')
    print(render(histories['reassert+native'], width=70))


if __name__ == '__main__':
    asyncio.run(main())
