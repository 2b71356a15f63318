"""The savings table: every strategy against no compaction and each harness anchor, at the same seeds.

Built on the fair setup of the incident benchmark: the anchors configured as harness documents them for
these sizes, one summarization rule for every summarizer (cap 500 tokens), and both reference players.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai_compaction_bench import strategies
from pydantic_ai_compaction_bench.cost import UsageTotals, cost
from pydantic_ai_compaction_bench.report import (
    Record,
    build_rows,
    failed_on_error,
    record_prices,
    task_requests,
    usage_totals,
)
from pydantic_ai_compaction_bench.runner import PLAYERS, Player, RunSpec, run_all

ANCHORS = ('none', *strategies.HARNESS)

OURS = (*strategies.OURS, 'clear')
"""Our strategies in the tables: the benchmark's, and our clearing view (`ClearThenSummarize` without its
summarizing tier), the counterpart of the clearing anchors, run with the same seeds and the same trigger."""

ALL = (*OURS, *strategies.HARNESS)
"""Every strategy the savings runs, in table order."""


def specs(size: int = 20, seeds: Sequence[int] = (101, 102, 103), player: Player = 'silent') -> list[RunSpec]:
    """The incident runs the table is built from."""
    return [
        RunSpec('incident', name, seed, variant, size, player=player)
        for variant in ('owner', 'lowercase', 'scope')
        for seed in seeds
        for name in ALL
    ]


def _ratio(ours: float, theirs: float) -> str:
    return f'{ours / theirs:.2f}×' if theirs and math.isfinite(ours) and math.isfinite(theirs) else '–'


def _dollars(value: float) -> str:
    return f'${value:.3f}' if math.isfinite(value) else '–'


def _tokens(value: float) -> str:
    return f'{value:,.0f}' if math.isfinite(value) else '–'


def table(records: Sequence[Record]) -> str:
    """Markdown: one block of rows per anchor."""
    rows = {row.strategy: row for row in build_rows(records, baseline=None)}
    lines = [
        '| strategy | vs | pass | anchor pass | cum. input | peak prompt | cost | compactor tokens |',
        '|---|---|---|---|---|---|---|---|',
    ]
    for anchor in ANCHORS:
        if anchor not in rows:
            continue  # a run of some strategies only (`--strategies`) has no block for an anchor it left out
        base = rows[anchor]
        for name in OURS:
            if name == anchor or name not in rows:
                continue
            row = rows[name]
            ours, theirs = f'{row.passed}/{row.runs - row.missing}', f'{base.passed}/{base.runs - base.missing}'
            if row.errors:
                ours += f' ({row.errors} failed on an error)'
            if not (row.measured and base.measured):  # a ratio of medians needs runs on both sides
                lines.append(f'| {name} | {anchor} | {ours} | {theirs} | – | – | – | – |')
                continue
            lines.append(
                f'| {name} | {anchor} | {ours} | {theirs} | {_ratio(row.cumulative_input, base.cumulative_input)} | '
                f'{_ratio(row.peak_prompt, base.peak_prompt)} | {_ratio(row.cost.high, base.cost.high)} | '
                f'{row.compactor_tokens:,.0f} |'
            )
    return '\n'.join(lines)


COST_TARGET = 0.5
"""Issue 16, target 3: one of ours costs at least this share less than no compaction at the best pass rate."""


def _kind_usage(record: Record, kind: str) -> UsageTotals:
    """The task's usage of one kind of request (`agent`, `compactor`)."""
    return usage_totals({**record, 'requests': [q for q in task_requests(record) if q['kind'] == kind]})


@dataclass(frozen=True)
class CostRow:
    """One strategy's bill, medians per run, split by billing class."""

    strategy: str
    passed: int
    runs: int
    errors: int
    """Runs that failed on an error: in `runs` and `cost_per_pass`, not in the medians (infinite without a run left)."""
    cost: float
    """Median bill of a run's task, without the probe turn (the benchmark's cost column)."""
    bill: float
    """Median bill of a run with its probe turn (asked after grading, it misses the cache whole)."""
    cost_per_pass: float
    """Every run's task bill over the passes (infinite without a pass)."""
    read: float
    write: float
    uncached: float
    output: float
    read_cost: float
    write_cost: float
    output_cost: float
    probe_cost: float
    compactor_cost: float


def cost_rows(records: Sequence[Record]) -> dict[str, CostRow]:
    """Per strategy: bill per run and per pass, and where it goes (cache reads, cache writes, output, probe)."""
    by: dict[str, list[Record]] = {}
    for record in records:
        if record['status'] == 'ok':
            by.setdefault(record['strategy'], []).append(record)
    rows: dict[str, CostRow] = {}
    for name, group in by.items():
        passed = sum(1 for r in group if r['passed'])
        # Cost per pass charges every run's bill; the medians per run leave out runs an error cut short (see
        # `report.failed_on_error`): counted, such a run's partial bill would make its strategy read cheaper.
        measured = [r for r in group if not failed_on_error(r)]
        priced = [(usage_totals(r), record_prices(r)) for r in measured]
        task = [cost(u, p).high for u, p in priced]
        bills = [cost(usage_totals(r, probe=True), record_prices(r)).high for r in measured]

        def median(values: Iterable[float]) -> float:
            listed = list(values)
            return statistics.median(listed) if listed else math.inf

        rows[name] = CostRow(
            strategy=name,
            passed=passed,
            runs=len(group),
            errors=len(group) - len(measured),
            cost=median(task),
            bill=median(bills),
            cost_per_pass=(
                sum(cost(usage_totals(r), record_prices(r)).high for r in group) / passed if passed else math.inf
            ),
            read=median(u.cache_read_tokens for u, _ in priced),
            write=median(u.cache_write_tokens for u, _ in priced),
            uncached=median(u.uncached_input_tokens for u, _ in priced),
            output=median(u.output_tokens for u, _ in priced),
            read_cost=median(u.cache_read_tokens * p.cache_read / 1e6 for u, p in priced),
            write_cost=median(u.cache_write_tokens * p.cache_write / 1e6 for u, p in priced),
            output_cost=median(u.output_tokens * p.output / 1e6 for u, p in priced),
            probe_cost=median(b - t for b, t in zip(bills, task, strict=True)),
            compactor_cost=median(cost(_kind_usage(r, 'compactor'), record_prices(r)).high for r in measured),
        )
    return rows


def cost_table(records: Sequence[Record]) -> str:
    """Markdown: each strategy's task bill per run and per pass, its cache split, and the probe turn's bill apart."""
    rows = cost_rows(records)
    none = rows.get('none')
    lines = [
        '| strategy | pass | cost/run | cost/pass | vs none | cache read tok. | cache write tok. | uncached tok. | '
        'output tok. | reads $ | writes $ | output $ | compactor $ | probe $ (not in cost) | with probe | '
        'with probe vs none |',
        '|' + '---|' * 16,
    ]
    for name in ALL:
        if name not in rows:
            continue
        r = rows[name]
        passed = f'{r.passed}/{r.runs}' + (f' ({r.errors} failed on an error)' if r.errors else '')
        lines.append(
            f'| {name} | {passed} | {_dollars(r.cost)} | {_dollars(r.cost_per_pass)} | '
            f'{_ratio(r.cost, none.cost) if none else "–"} | {_tokens(r.read)} | {_tokens(r.write)} | '
            f'{_tokens(r.uncached)} | {_tokens(r.output)} | {_dollars(r.read_cost)} | {_dollars(r.write_cost)} | '
            f'{_dollars(r.output_cost)} | {_dollars(r.compactor_cost)} | {_dollars(r.probe_cost)} | '
            f'{_dollars(r.bill)} | {_ratio(r.bill, none.bill) if none else "–"} |'
        )
    return '\n'.join(lines)


def target(records: Sequence[Record]) -> str:
    """Target 3 of issue 16, judged from records.

    At the best pass rate any strategy reaches, the cheapest of ours (no compaction aside) must cost at least
    50 % less than no compaction and less than every harness anchor that reaches the same rate. Costs are
    medians per run of the task (the benchmark's cost column: the probe turn, asked after grading, left out); the
    same comparison with the probe turn is printed beside it.
    """
    rows = cost_rows(records)
    if 'none' not in rows:
        return 'No run of no compaction: the cost target cannot be judged.'
    if not math.isfinite(rows['none'].cost):
        return 'Every run of no compaction failed on an error: the cost target cannot be judged.'
    rate = {name: row.passed / row.runs for name, row in rows.items()}
    best_rate = max(rate.values())
    ours = [rows[n] for n in OURS if n != 'none' and n in rows and rate[n] >= best_rate]
    anchors = [rows[n] for n in strategies.HARNESS if n in rows and rate[n] >= best_rate]
    none = rows['none']
    shown = f'{max(row.passed for row in rows.values())}/{none.runs}'
    if not ours:
        return f'Best pass rate ({shown}): none of ours reaches it: not met.'
    best = min(ours, key=lambda row: row.cost)
    if not math.isfinite(best.cost):
        return f'Best pass rate ({shown}): every run of ours at it failed on an error: the target cannot be judged.'
    saving = 1 - best.cost / none.cost
    bill_saving = 1 - best.bill / none.bill
    cheaper = all(best.cost < anchor.cost for anchor in anchors)
    beaten = ', '.join(f'{a.strategy} {_dollars(a.cost)}' for a in anchors) or 'no anchor reaches it'
    verdict = 'met' if saving >= COST_TARGET and cheaper else 'not met'
    rows_by_input = {row.strategy: row for row in build_rows(records, baseline=None)}
    input_saving = 1 - rows_by_input[best.strategy].cumulative_input / rows_by_input['none'].cumulative_input
    return (
        f'Best pass rate ({shown}): cheapest of ours is {best.strategy} at ${best.cost:.3f} a run, '
        f'{saving:.0%} less than no compaction (${none.cost:.3f}; target ≥ 50 %) and '
        f'{"less than" if cheaper else "not less than"} every harness anchor at that rate ({beaten}); '
        f'{input_saving:.0%} less input. With the probe turn (asked after grading, not the task): '
        f'{bill_saving:.0%} less (${best.bill:.3f} against ${none.bill:.3f}). Target: {verdict}.'
    )


def floor(records: Sequence[Record]) -> str:
    """What no strategy can go under: no compaction's cache writes are each tool result written once."""
    rows = cost_rows(records)
    none = rows.get('none')
    if none is None:
        return ''
    by = [r for r in records if r['strategy'] == 'none' and r['status'] == 'ok' and not failed_on_error(r)]
    if not by:
        return ''
    prices = record_prices(by[0])
    writes = statistics.median(usage_totals(r).cache_write_tokens for r in by)
    least = writes * min(prices.cache_write, prices.input) / 1e6
    written = writes * prices.cache_write / 1e6
    return (
        f'Floor: no compaction writes each tool result to the cache once ({writes:,.0f} tokens a run without the '
        f'probe); every strategy sends them at least once: ${written:.3f} as cache writes '
        f"({written / none.cost:.0%} of no compaction's ${none.cost:.3f} without the probe), "
        f'${least:.3f} even if none were cached ({least / none.cost:.0%}). With the probe turn no compaction '
        f'costs ${none.bill:.3f}.'
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
        print(
            f"### Cost per strategy, {player} player (medians per run; cost/pass = all runs' bills over passes; "
            'the probe turn is asked after grading)\n'
        )
        print(cost_table(records))
        print()
        print(target(records))
        print()
        print(floor(records))
        print()
        every.extend(records)
    return every


if __name__ == '__main__':
    # The savings and cost section of `make bench` alone: `python -m pydantic_ai_compaction_bench.savings`.
    import asyncio

    asyncio.run(main())
