"""Prompt contracts against a real model: does each compactor prompt's reply parse and validate?

Every strategy that asks a model for a compaction (fork `json`/`free`/`fixed`, the stateless summary,
the native emulation) is replayed once per seed on a small recorded tool loop, through the
strategy's own parser and the runtime validator. A reply that fails shows as the fallback reason the
runtime recorded (`unparseable`, `schema`, `empty`, ...).

    python -m pydantic_ai_compaction_bench.contracts --model openai:qwen3-8b --base-url http://127.0.0.1:8080/v1
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction.processors import Fork, Native, StatelessSummary
from pydantic_ai_compaction.runtime import CompactionCapability, our_record
from pydantic_ai_compaction.testing.replay import replay
from pydantic_ai_compaction_bench.models import BASE_URL_ENV, openai_compatible

PROMPTS: dict[str, Callable[[], CompactionCapability[Any]]] = {
    'fork-json': lambda: Fork(variant='json'),
    'fork-free': lambda: Fork(variant='free'),
    'fork-fixed': lambda: Fork(variant='fixed'),
    'summary': lambda: StatelessSummary(),
    'native-emulated': lambda: Native(),
}
"""Each compactor prompt, by the strategy that sends it."""

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_SERVICES = ('api', 'billing', 'search', 'media', 'auth')
_OWNERS = ('alice', 'bob', 'chen', 'dana')


def history(seed: int, steps: int = 8) -> list[ModelMessage]:
    """A small audit tool loop (a rule change half-way), ending with a tool return awaiting the model."""
    rng = random.Random(seed)
    owner = rng.choice(_OWNERS)
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart('You audit service logs and report incidents.', timestamp=T0),
                UserPromptPart(
                    f'Audit logs 0-{steps - 1}. Report incident ids and the owner. Ignore service legacy.', timestamp=T0
                ),
            ],
            timestamp=T0,
        )
    ]
    for index in range(steps):
        call_id = f'call_{seed}_{index}'
        messages.append(
            ModelResponse(
                parts=[ToolCallPart('read_log', {'index': index}, tool_call_id=call_id)],
                usage=RequestUsage(input_tokens=300 * (index + 1), output_tokens=12),
                timestamp=T0,
            )
        )
        lines = [
            f'{index:02d}-{line:03d} service={rng.choice(_SERVICES)} status={rng.choice(("ok", "ok", "error"))} '
            f'latency={rng.randint(3, 900)}ms'
            for line in range(30)
        ]
        if index == steps // 2:
            lines.insert(0, f'CHANGE: incidents are now owned by {owner}; report ids in lowercase')
        lines.append(f'INCIDENT INC-{seed}{index:02d} sev {rng.randint(1, 4)}')
        messages.append(
            ModelRequest(
                parts=[ToolReturnPart('read_log', '\n'.join(lines), tool_call_id=call_id, timestamp=T0)], timestamp=T0
            )
        )
    return messages


@dataclass
class Outcome:
    """One prompt's results over the seeds."""

    prompt: str
    valid: int = 0
    failures: Counter[str] = field(default_factory=Counter[str])
    details: list[str] = field(default_factory=list[str])

    @property
    def runs(self) -> int:
        return self.valid + sum(self.failures.values())


async def check_prompt(name: str, model: Model, seeds: Sequence[int]) -> Outcome:
    """Replay *name*'s strategy once per seed on *model*; count valid replies and fallback reasons."""
    outcome = Outcome(name)
    for seed in seeds:
        strategy = PROMPTS[name]()
        try:
            compacted = await replay(strategy, history(seed), model=model)
        except Exception as error:  # a server that is down or refuses the request
            outcome.failures['request_error'] += 1
            outcome.details.append(f'seed {seed}: {type(error).__name__}: {str(error)[:200]}')
            continue
        records = [record for message in compacted for part in message.parts if (record := our_record(part))]
        if not records:
            # Even the fallback layout would drop nothing: the history is too short to tell.
            outcome.failures['nothing_dropped'] += 1
            continue
        reason = records[-1].get('fallback_reason')
        if reason is None:
            outcome.valid += 1
        else:
            outcome.failures[str(reason)] += 1
            outcome.details.append(f'seed {seed}: {reason}: {str(records[-1].get("detail"))[:200]}')
    return outcome


def table(model: str, outcomes: Sequence[Outcome]) -> str:
    """The Markdown table for the docs."""
    lines = [
        f'Prompt contracts on `{model}`: replies that parse and validate, per compactor prompt.',
        '',
        '| prompt | valid | runs | failures |',
        '|---|---|---|---|',
    ]
    for outcome in outcomes:
        failures = ', '.join(f'{reason} ×{count}' for reason, count in sorted(outcome.failures.items())) or '—'
        lines.append(f'| {outcome.prompt} | {outcome.valid} | {outcome.runs} | {failures} |')
    return '\n'.join(lines)


async def run(model: str, base_url: str, seeds: Sequence[int], prompts: Sequence[str]) -> list[Outcome]:
    """Every prompt over every seed, one request at a time (local servers serve one at a time anyway)."""
    target = openai_compatible(model, base_url)
    return [await check_prompt(name, target, seeds) for name in prompts]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `make realmodel`."""
    import os

    parser = argparse.ArgumentParser(prog='pai-compaction-contracts', description=(__doc__ or '').split('\n\n')[0])
    parser.add_argument('--model', default='openai:local', help='openai:NAME as the server knows the model')
    parser.add_argument('--base-url', default=os.environ.get(BASE_URL_ENV), help=f'default ${BASE_URL_ENV}')
    parser.add_argument('--seeds', type=int, nargs='+', default=[1, 2, 3])
    parser.add_argument('--prompts', nargs='+', choices=list(PROMPTS), default=list(PROMPTS))
    parser.add_argument('--out', type=Path, default=Path('out/realmodel.md'))
    args = parser.parse_args(argv)
    if not args.base_url:
        print(f'No server given (--base-url or ${BASE_URL_ENV}): prompt contracts skipped.')
        return 0
    outcomes = asyncio.run(run(args.model, args.base_url, args.seeds, args.prompts))
    text = table(args.model, outcomes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + '\n')
    print(text)
    for outcome in outcomes:
        for detail in outcome.details:
            print(f'{outcome.prompt} {detail}', file=sys.stderr)
    print(f'\nTable written to {args.out}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
