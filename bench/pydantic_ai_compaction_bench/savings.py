"""The savings table: every strategy against no compaction and each harness anchor, at the same seeds.

Built on the fair setup of the incident benchmark: the anchors configured as harness documents them for
these sizes, one summarization rule for every summarizer (cap 500 tokens), and both reference players.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai_compaction_bench import strategies
from pydantic_ai_compaction_bench.report import Record, Row, build_rows
from pydantic_ai_compaction_bench.runner import PLAYERS, Player, RunSpec, run_all

ANCHORS = ('none', *strategies.HARNESS)


def specs(size: int = 20, seeds: Sequence[int] = (101, 102, 103), player: Player = 'silent') -> list[RunSpec]:
    """The incident runs the table is built from."""
    return [
        RunSpec('incident', name, seed, variant, size, player=player)
        for variant in ('owner', 'lowercase', 'scope')
        for seed in seeds
        for name in strategies.ALL
    ]


def _ratio(ours: float, theirs: float) -> str:
    return f'{ours / theirs:.2f}×' if theirs else '–'


def table(records: Sequence[Record]) -> str:
    """Markdown: one block of rows per anchor."""
    rows = {row.strategy: row for row in build_rows(records, baseline=None)}
    lines = [
        '| strategy | vs | pass | anchor pass | cum. input | peak prompt | cost | compactor tokens |',
        '|---|---|---|---|---|---|---|---|',
    ]
    for anchor in ANCHORS:
        base = rows[anchor]
        for name in strategies.OURS:
            if name == anchor or name not in rows:
                continue
            row = rows[name]
            ours, theirs = f'{row.passed}/{row.runs - row.missing}', f'{base.passed}/{base.runs - base.missing}'
            lines.append(
                f'| {name} | {anchor} | {ours} | {theirs} | {_ratio(row.cumulative_input, base.cumulative_input)} | '
                f'{_ratio(row.peak_prompt, base.peak_prompt)} | {_ratio(row.cost.high, base.cost.high)} | '
                f'{row.compactor_tokens:,.0f} |'
            )
    return '\n'.join(lines)


def target(records: Sequence[Record]) -> str:
    """Whether the best strategy at no compaction's pass rate saves at least 50 % input and 60 % cost."""
    rows = {row.strategy: row for row in build_rows(records, baseline=None)}
    none = rows['none']
    at_rate = [rows[n] for n in strategies.OURS if n != 'none' and n in rows and rows[n].passed >= none.passed]
    if not at_rate:
        return "No strategy reaches no-compaction's pass rate."
    best: Row = min(at_rate, key=lambda r: r.cost.high)
    input_saving = 1 - best.cumulative_input / none.cumulative_input
    cost_saving = 1 - best.cost.high / none.cost.high
    verdict = 'met' if input_saving >= 0.5 and cost_saving >= 0.6 else 'not met'
    return (
        f"Best strategy at no-compaction's pass rate ({none.passed}/{none.runs - none.missing}): {best.strategy}, "
        f'{input_saving:.0%} less cumulative input (target 50 %), {cost_saving:.0%} lower cache-aware cost '
        f'(target 60 %): {verdict}.'
    )


async def main(progress: bool = False) -> list[dict[str, Any]]:
    """Run the incident benchmark (20 logs) with each player and print a savings table for each."""
    every: list[dict[str, Any]] = []
    for player in PLAYERS:
        records = await run_all(specs(player=player), concurrency=2, progress=progress, jobs=2)
        print(
            f'## Savings on the 20-log incident audit, {player} player (reference model, summary cap 500; '
            'ratios of medians per run)\n'
        )
        print(table(records))
        print()
        print(target(records))
        print()
        every.extend(records)
    return every
