"""Tables and plots rebuilt from JSONL records alone: no model calls, nothing else read."""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import orjson

from pydantic_ai_compaction_bench.cost import REFERENCE_PRICES, CostRange, PriceTable, UsageTotals, cost, prices_for
from pydantic_ai_compaction_bench.reference.model import DISCLAIMER
from pydantic_ai_compaction_bench.stats import compare, holm

Record = dict[str, Any]


def write_records(records: Iterable[Record], path: Path) -> None:
    """Append records to a JSONL file (one run per line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open('ab') as handle:
        for record in records:
            handle.write(orjson.dumps(record) + b'\n')


class RecordsError(ValueError):
    """A line of a records file that is not a JSON record, named by its file and line number."""


def read_records(path: Path, *, warn: Callable[[str], None] | None = None) -> list[Record]:
    """Every record in a JSONL file.

    A last line that is cut off (no newline, not JSON) is the record a killed `bench` was appending: it is left
    out, and *warn* is told, so that `--resume` reruns its run. Any other line that is not JSON raises.

    Args:
        path: The records file.
        warn: Called with a one-line warning when a cut-off last line is left out.

    Raises:
        RecordsError: A line other than a cut-off last one is not JSON; the message names *path* and the line.
    """
    lines = path.read_bytes().split(b'\n')
    records: list[Record] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError as error:
            # Only the last piece lacks its newline: `write_records` ends every record with one.
            if number == len(lines):
                if warn is not None:
                    warn(
                        f'{path}, line {number}: cut off (a record being written when the run was stopped); '
                        'left out, and --resume reruns its run'
                    )
                continue
            raise RecordsError(
                f'{path} is not a JSONL records file: line {number} is not JSON ({error.msg} at column {error.colno})'
            ) from None
    return records


def end_with_newline(path: Path) -> str:
    """Make *path* end with a newline before records are appended to it; what was done, or '' if nothing was.

    A record appended after a line without its newline would join it, and both would be lost: a cut-off last
    line (see `read_records`) is removed, a whole one gets its newline.
    """
    data = path.read_bytes()
    if not data or data.endswith(b'\n'):
        return ''
    start = data.rfind(b'\n') + 1
    try:
        orjson.loads(data[start:])
    except orjson.JSONDecodeError:
        with path.open('r+b') as handle:
            handle.truncate(start)
        return f'removed the cut-off last line of {path} ({len(data) - start} bytes)'
    with path.open('ab') as handle:
        handle.write(b'\n')
    return ''


@dataclass(frozen=True)
class Row:
    """One strategy's line in a table."""

    strategy: str
    runs: int
    missing: int
    passed: int
    applied: tuple[int, int]
    probe: tuple[int, int]
    requests: float
    peak_prompt: float
    final_prompt: float
    cumulative_input: float
    cost: CostRange
    compactor_tokens: float
    p_one_sided: float | None = None
    p_holm: float | None = None
    interval: tuple[float, float] | None = None
    p_two_sided: float | None = None
    """Exact McNemar p for "the two differ": the test an interval that excludes zero is checked against."""

    answers: tuple[int, int, int] | None = None
    """Delayed recall: correct, invented and not-sure answers over all runs."""

    output_per_step: float = 0.0
    """Median over runs of the mean output tokens per agent request (re-derivation shows here)."""

    total_tokens: float = 0.0
    """Median over runs of every token of the pipeline: input and output, compactor and curator calls included."""

    followed_fake: tuple[int, int] = (0, 0)
    """Seed 004's fake-instruction measure: runs whose report followed the unmarked fake, of runs that had one."""

    fake_in_summary: tuple[int, int] = (0, 0)
    """Runs where an intermediate summary carried the unmarked fake, of runs that had one."""

    errors: int = 0
    """Runs that failed on an error (`failed_on_error`): counted as not passed and paired, left out of the medians."""

    @property
    def measured(self) -> int:
        """Runs the medians per run are taken over: neither missing nor failed on an error."""
        return self.runs - self.missing - self.errors


def prices_of(model: str, override: PriceTable | None = None) -> PriceTable:
    """Prices for a record's model: an explicit table, the reference table, or genai-prices."""
    if override is not None:
        return override
    if model == 'reference':
        return REFERENCE_PRICES
    found = prices_for(model)
    if found is None:
        raise ValueError(f'no prices known for {model!r}; pass an explicit price table')
    return found


def record_prices(record: Record, override: PriceTable | None = None) -> PriceTable:
    """Prices for *record*: an explicit table, else the ones `bench` recorded with it (`prices`), else its model's.

    Records written before `bench` recorded its prices carry none and are priced by their model, as they were.
    """
    if override is None and (recorded := record.get('prices')) is not None:
        return PriceTable(**recorded)
    return prices_of(record['model'], override)


def recorded_prices(prices: PriceTable | None, model: str) -> dict[str, float] | None:
    """What `bench` records as a run's `prices`: *prices* if given, else *model*'s own as known now, else None."""
    if prices is None:
        try:
            prices = prices_of(model)
        except ValueError:  # an unknown model without --prices: `summarize` asks for them, as `bench` does
            return None
    return dataclasses.asdict(prices)


def _price(value: float) -> str:
    """*value* written in full (`repr`'s shortest text that reads back as the same float), without a trailing `.0`:
    `:g` keeps six digits, and a price written so no longer matched the one recorded."""
    text = repr(float(value))
    return text[:-2] if text.endswith('.0') else text


def describe_prices(prices: PriceTable) -> str:
    """*prices* in words, for a table header or an error: `$2 input, $0.1 cache read, ... per million tokens`."""
    return (
        f'${_price(prices.input)} input, ${_price(prices.cache_read)} cache read, '
        f'${_price(prices.cache_write)} cache write, ${_price(prices.output)} output per million tokens'
    )


def prices_argument(prices: PriceTable) -> str:
    """*prices* as `--prices` takes them: `input,cache_read,cache_write,output`."""
    return ','.join(_price(value) for value in dataclasses.astuple(prices))


def priced_at(record: Record) -> PriceTable | None:
    """The prices *record* is priced at without `--prices` (`record_prices`), or None when none are known."""
    try:
        return record_prices(record)
    except ValueError:  # an unknown model recorded without prices: pricing it asks for --prices
        return None


def price_sheets(records: Iterable[Record]) -> dict[str, dict[PriceTable | None, int]]:
    """Per model, the prices its priced runs (status ok) are priced at without `--prices`, and how many runs each.

    Only runs of one model share a table, so one model's runs must share one price sheet; other models may differ.
    """
    sheets: dict[str, dict[PriceTable | None, int]] = defaultdict(lambda: defaultdict(int))
    for record in records:
        if record['status'] == 'ok':
            sheets[record['model']][priced_at(record)] += 1
    return {model: dict(counts) for model, counts in sheets.items()}


def describe_sheets(counts: dict[PriceTable | None, int]) -> str:
    """Price sheets and how many runs each, most runs first: `$2 input, ... per million tokens (3 runs); ...`."""
    ordered = sorted(counts.items(), key=lambda item: -item[1])
    return '; '.join(
        f'{describe_prices(sheet) if sheet is not None else "no known prices"} ({count} run{"s" * (count != 1)})'
        for sheet, count in ordered
    )


def mixed_prices(records: Iterable[Record]) -> str:
    """Why *records* cannot share tables without `--prices`: runs of one model priced at different prices, else ''.

    A median over runs priced at different sheets is no cost at any of them, so `summarize` refuses it rather
    than showing one under a header that names one rate.
    """
    mixed = {model: counts for model, counts in price_sheets(records).items() if len(counts) > 1}
    return '; '.join(f'runs of {model} are priced at {describe_sheets(counts)}' for model, counts in mixed.items())


def _cost_basis(records: Sequence[Record], prices: PriceTable | None) -> str:
    """What a table's cost column is priced at, for its header."""
    if prices is not None:
        return f'the given --prices ({describe_prices(prices)})'
    ok = [r for r in records if r['status'] == 'ok']
    sheets = {priced_at(r) for r in ok}
    if len(sheets) != 1 or (sheet := sheets.pop()) is None:
        # No priced run, or prices unknown (pricing raises) or mixed (`summarize` refuses first).
        return "the model's rates"
    recorded = sum(1 for r in ok if r.get('prices') is not None)
    if recorded == len(ok):
        source = 'the prices recorded with the runs'
    elif recorded == 0:
        source = "the model's rates as known now"
    else:
        source = "the prices recorded with the runs (the model's rates as known now for runs recorded without)"
    return f'{source} ({describe_prices(sheet)})'


def task_requests(record: Record) -> list[dict[str, Any]]:
    """The requests of a run's task, compactor calls included: every request but the probe turn's.

    The probe ("what instructions are in force?") is asked after grading, to measure what the agent still knows; it
    is not the task's work. Sent without the task's output tool, it misses the prompt cache whole (its tools
    differ), so counted it charged the run with the largest context a full cache write, no compaction most.
    """
    return [q for q in record.get('requests') or () if not q.get('probe')]


def usage_totals(record: Record, *, probe: bool = False) -> UsageTotals:
    """What a run's task sent and received, compactor calls included (*probe*: the probe turn's requests too)."""
    requests: list[dict[str, Any]] = list(record.get('requests') or []) if probe else task_requests(record)
    return UsageTotals(
        input_tokens=sum(r['input_tokens'] for r in requests),
        cache_read_tokens=sum(r['cache_read_tokens'] for r in requests),
        cache_write_tokens=sum(r['cache_write_tokens'] for r in requests),
        output_tokens=sum(r['output_tokens'] for r in requests),
        cache_detail=all(r.get('cache_detail', True) for r in requests),
    )


def agent_prompts(record: Record) -> list[int]:
    """Input tokens of each agent request of the task, in order (the prompt-size curve; the probe's not)."""
    return [r['input_tokens'] for r in task_requests(record) if r['kind'] == 'agent']


def _output_per_step(record: Record) -> float:
    requests = task_requests(record)
    outputs: list[int] = [r['output_tokens'] for r in requests if r['kind'] == 'agent']
    return sum(outputs) / len(outputs) if outputs else 0.0


def failed_on_error(record: Record) -> bool:
    """Whether *record* is a run an error ended early (`agent_error`): its spend stopped with it.

    Such a run counts as not passed and stays in the pairs, but not in the medians per run: its bill is only what
    it spent before the error, a lower bound of what the run would have cost, so a strategy that fails early would
    read cheaper. A run stopped by the request limit is not one of these: it spent the whole budget the task allows.
    """
    return record['status'] == 'ok' and 'agent_error' in (record.get('problems') or ())


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def build_rows(records: Sequence[Record], *, baseline: str | None, prices: PriceTable | None = None) -> list[Row]:
    """One row per strategy, with paired statistics against *baseline* (pairs by seed and variant)."""
    by_strategy: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        by_strategy[record['strategy']].append(record)
    base = {(r['seed'], r['variant']): r for r in by_strategy.get(baseline or '', []) if r['status'] == 'ok'}
    rows: list[Row] = []
    for strategy, group in by_strategy.items():
        ok = [r for r in group if r['status'] == 'ok']
        # Pass counts and pairs take every run; the medians per run only the runs no error cut short.
        measured = [r for r in ok if not failed_on_error(r)]
        costs = [cost(usage_totals(r), record_prices(r, prices)) for r in measured]
        applied = [r['applied'] for r in ok if r['applied'] is not None]
        probes = [r['probe'] for r in ok if r['probe'] is not None]
        row = Row(
            strategy=strategy,
            runs=len(group),
            missing=len(group) - len(ok),
            passed=sum(1 for r in ok if r['passed']),
            applied=(sum(1 for a in applied if a), len(applied)),
            probe=(sum(1 for p in probes if p), len(probes)),
            requests=_median([len(task_requests(r)) for r in measured]),
            peak_prompt=_median([max(agent_prompts(r), default=0) for r in measured]),
            final_prompt=_median([(agent_prompts(r) or [0])[-1] for r in measured]),
            cumulative_input=_median([usage_totals(r).input_tokens for r in measured]),
            cost=CostRange(_median([c.low for c in costs]), _median([c.high for c in costs])),
            compactor_tokens=_median(
                [
                    sum(q['input_tokens'] + q['output_tokens'] for q in task_requests(r) if q['kind'] == 'compactor')
                    for r in measured
                ]
            ),
            errors=len(ok) - len(measured),
        )
        followed = [r['followed_fake'] for r in ok if r.get('followed_fake') is not None]
        carried = [r['fake_in_summary'] for r in ok if r.get('fake_in_summary') is not None]
        row = replace(
            row,
            output_per_step=_median([_output_per_step(r) for r in measured]),
            total_tokens=_median([usage_totals(r).input_tokens + usage_totals(r).output_tokens for r in measured]),
            followed_fake=(sum(1 for f in followed if f), len(followed)),
            fake_in_summary=(sum(1 for c in carried if c), len(carried)),
        )
        answered = [r['answers'] for r in ok if r.get('answers')]
        if answered:
            row = replace(
                row,
                answers=(
                    sum(a['correct'] for a in answered),
                    sum(a['invented'] for a in answered),
                    sum(a['not_sure'] for a in answered),
                ),
            )
        pairs = [
            (bool(r['passed']), bool(base[key]['passed'])) for r in ok if (key := (r['seed'], r['variant'])) in base
        ]
        if baseline is not None and strategy != baseline and pairs:
            comparison = compare([a for a, _ in pairs], [b for _, b in pairs])
            row = replace(
                row,
                p_one_sided=comparison.p_one_sided,
                p_two_sided=comparison.p_two_sided,
                interval=comparison.interval,
            )
        rows.append(row)
    tested = [row for row in rows if row.p_one_sided is not None]
    adjusted = holm([row.p_one_sided for row in tested if row.p_one_sided is not None])
    by_name = {row.strategy: p for row, p in zip(tested, adjusted, strict=True)}
    return [replace(row, p_holm=by_name.get(row.strategy)) for row in rows]


def _fraction(pair: tuple[int, int]) -> str:
    return f'{pair[0]}/{pair[1]}' if pair[1] else '–'


def _money(value: CostRange) -> str:
    return f'${value.low:.3f}' if abs(value.high - value.low) < 5e-4 else f'${value.low:.3f}–{value.high:.3f}'


def markdown_table(rows: Sequence[Row], *, baseline: str | None) -> str:
    """The table as Markdown."""
    against = f' vs {baseline}' if baseline else ''
    header = [
        'strategy', 'pass', 'applied', 'probe', 'requests', 'peak prompt', 'final prompt', 'cum. input',
        'out/step', 'total tok.', 'cost', 'compactor tok.', f'p one-sided{against}', 'p Holm', '95% CI (points)',
    ]  # fmt: skip
    with_answers = any(row.answers is not None for row in rows)
    if with_answers:
        header.insert(4, 'answers correct/invented/not sure')
    with_fake = any(row.followed_fake[1] or row.fake_in_summary[1] for row in rows)
    if with_fake:
        header[4:4] = ['followed fake', 'fake in a summary']
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '|'.join('---' for _ in header) + '|']
    overstated = False
    for row in sorted(rows, key=lambda r: (-r.passed / max(r.runs - r.missing, 1), r.cumulative_input)):
        ok = row.runs - row.missing
        notes = [f'{row.missing} missing'] * bool(row.missing) + [f'{row.errors} failed on an error'] * bool(row.errors)
        passed = f'{row.passed}/{ok}' + (f' ({", ".join(notes)})' if notes else '')
        interval = f'{row.interval[0] * 100:+.0f} to {row.interval[1] * 100:+.0f}' if row.interval else '–'
        if _overstated(row):
            interval += ' †'
            overstated = True
        # Without a run to take them over, the medians are unknown, not zero (which would read as free).
        known = row.measured > 0
        medians = [
            f'{row.requests:.0f}', f'{row.peak_prompt:,.0f}', f'{row.final_prompt:,.0f}',
            f'{row.cumulative_input:,.0f}', f'{row.output_per_step:,.0f}', f'{row.total_tokens:,.0f}',
            _money(row.cost), f'{row.compactor_tokens:,.0f}',
        ]  # fmt: skip
        cells = [
            row.strategy, passed, _fraction(row.applied), _fraction(row.probe),
            *(medians if known else ['–'] * len(medians)),
            '–' if row.p_one_sided is None else f'{row.p_one_sided:.3f}',
            '–' if row.p_holm is None else f'{row.p_holm:.3f}', interval,
        ]  # fmt: skip
        if with_answers:
            cells.insert(4, '/'.join(map(str, row.answers)) if row.answers else '–')
        if with_fake:
            cells[4:4] = [_fraction(row.followed_fake), _fraction(row.fake_in_summary)]
        lines.append('| ' + ' | '.join(cells) + ' |')
    if overstated:
        lines += ['', OVERSTATED_NOTE]
    return '\n'.join(lines)


OVERSTATED_NOTE = (
    "† The interval excludes zero but the exact test does not (two-sided p ≥ 0.05): Newcombe's score interval is "
    'approximate and, with this few discordant pairs, narrower than the exact test; read the p columns.'
)
"""The note under a table whose interval and exact test disagree."""


def _overstated(row: Row) -> bool:
    """Whether *row*'s interval excludes zero where the exact test does not reject at 5 % (two pairs of two, both
    for one side: the interval reads +7 to +100 points, the exact test p = 0.5)."""
    if row.interval is None or row.p_two_sided is None:
        return False
    return (row.interval[0] > 0 or row.interval[1] < 0) and row.p_two_sided >= 0.05


GroupKey = tuple[str, int, str, int, Any, Any, Any, int]
"""Task, size, model, trigger, summary budget, player, anchor pins, reasoning tokens a step: what one table holds
fixed."""


def group_key(record: Record) -> GroupKey:
    """The table a record belongs to (records without the newer fields group as `None`)."""
    return (
        record['task'],
        record['size'],
        # Two servers can serve different models under one name: their runs are two tables, not one.
        f'{record["model"]} at {url}' if (url := record.get('base_url')) else record['model'],
        record.get('trigger_tokens') or 0,
        record.get('summary_budget'),
        record.get('player'),
        record.get('anchor_pins'),
        think_tokens(record),
    )


SettingKey = tuple[str, int, str, int, bool, int]
"""Task, size, model, trigger, anchor pins, reasoning tokens a step: what a sensitivity table or a plot holds fixed
(each holds every player and summary cap)."""


def setting_key(record: Record) -> SettingKey:
    """The sensitivity table and the plot a record belongs to."""
    return (
        record['task'],
        record['size'],
        record['model'],
        record.get('trigger_tokens') or 0,
        bool(record.get('anchor_pins')),
        think_tokens(record),
    )


def think_tokens(record: Record) -> int:
    """The reasoning tokens a step of *record*'s run was given (`--think-tokens`; 0 when not recorded)."""
    value = record.get('think_tokens')
    return value if isinstance(value, int) else 0


def group_title(key: GroupKey) -> str:
    """What a table or plot holds fixed, as its title says it."""
    task, size, model, _, summary_budget, player, pins, think = key  # the trigger is said in the table's caption
    title = f'{task}, size {size}, model {model}'
    if player is not None:
        title += f', player {player}'
    if summary_budget is not None:
        title += f', summary cap {summary_budget}'
    if pins:
        title += ', anchors pin markers'
    if think:
        title += f', {think:,} reasoning tokens a step'
    return title


def main_budget(records: Sequence[Record], wanted: int | None = None) -> int | None:
    """The summary budget of the main tables: *wanted* if records have it; else the one `bench` ran its main
    tables at, as it recorded it with the newest run (`main_summary_budget`), or for records written before it
    did, the only one the strategies that never ask for a summary ran at (`NO_SUMMARIZER`: the sensitivity grid
    carries their result across); else the most common one."""
    budgets: list[int] = [int(r['summary_budget']) for r in records if r.get('summary_budget') is not None]
    if not budgets:
        return None
    if wanted in budgets:
        return wanted
    # The newest run's: a `bench --resume` at another main cap prints its tables at the cap it was given.
    recorded = [r['main_summary_budget'] for r in records if isinstance(r.get('main_summary_budget'), int)]
    if recorded and recorded[-1] in budgets:
        return recorded[-1]
    from pydantic_ai_compaction_bench.strategies import NO_SUMMARIZER

    unsummarized = {
        int(r['summary_budget'])
        for r in records
        if r.get('summary_budget') is not None and r['strategy'] in NO_SUMMARIZER
    }
    if len(unsummarized) == 1:
        return unsummarized.pop()
    return max(sorted(set(budgets)), key=budgets.count)


def summary_free(records: Iterable[Record]) -> bool:
    """Whether no finished run of *records* asked for a summary: the summary cap cannot have changed them."""
    return all(
        not any(q['kind'] == 'compactor' for q in r.get('requests') or ()) for r in records if r['status'] == 'ok'
    )


CARRIED_FROM = 'carried_from_summary_cap'
"""Set on a record `at_cap` shows at a cap it did not run at: the cap it ran at."""


def at_cap(records: Sequence[Record], budget: int | None) -> list[Record]:
    """The records of the main tables and plots at summary cap *budget*.

    Runs at *budget*, runs without a cap (a real model), and, as the sensitivity table does, the runs of a strategy
    that never asked for a summary at a cap it ran at instead (`bench` runs the strategies in `NO_SUMMARIZER` at
    the main cap only): the cap cannot change them, and without them `summarize --summary-budget` at another cap
    would leave out the baselines. Carried records are copies at *budget*, marked with `CARRIED_FROM`.
    """
    kept = [r for r in records if r.get('summary_budget') in (None, budget)]
    present = {(setting_key(r), r.get('player'), r['strategy']) for r in kept}
    elsewhere: dict[tuple[SettingKey, Any, str], list[Record]] = defaultdict(list)
    for record in records:
        where = (setting_key(record), record.get('player'), record['strategy'])
        if where not in present:
            elsewhere[where].append(record)
    default = main_budget(records)
    for group in elsewhere.values():
        if not summary_free(group):
            continue
        caps = sorted({int(r['summary_budget']) for r in group})
        source = default if default in caps else caps[0]
        kept.extend(
            {**r, 'summary_budget': budget, CARRIED_FROM: source} for r in group if r['summary_budget'] == source
        )
    return kept


def summarize(
    records: Sequence[Record],
    *,
    baseline: str | None = 'native',
    prices: PriceTable | None = None,
    budget: int | None = None,
) -> str:
    """Every table, as Markdown, from records alone.

    One main table per task, size, model and player at the main summary budget (*budget* if the records
    have it, else the one `bench` ran them at: `main_budget`); a sensitivity table per task and size when the
    records hold several budgets or players; and the configuration of every strategy, as recorded.

    Raises:
        ValueError: Without *prices*, when runs of one model were priced at different prices (`mixed_prices`).
    """
    if prices is None and (mixed := mixed_prices(records)):
        raise ValueError(f'{mixed}: pass --prices to price every run at one sheet')
    chosen_budget = main_budget(records, budget)
    groups: dict[GroupKey, list[Record]] = defaultdict(list)
    for record in at_cap(records, chosen_budget):
        groups[group_key(record)].append(record)
    sections: list[str] = []
    for key, group in sorted(groups.items(), key=lambda item: _order(item[0])):
        _, _, model, trigger, summary_budget, *_ = key
        if summary_budget is not None and summary_budget != chosen_budget:
            continue
        seeds = sorted({r['seed'] for r in group})
        variants = sorted({r['variant'] for r in group})
        title = f'### {group_title(key)}'
        runs = sorted({sum(1 for r in group if r['strategy'] == name) for name in {r['strategy'] for r in group}})
        # Seeds and variants are those of any run: when strategies ran different sets, say so, since their pass
        # counts are then over different scenarios.
        differ = f', runs per strategy differ ({runs[0]} to {runs[-1]})' if len(runs) > 1 else ''
        meta = (
            f'{len(seeds)} seeds × {len(variants)} variant(s) ({", ".join(variants)}){differ}; trigger {trigger:,}; '
            'medians per run of the task (the probe turn, asked after grading, is not counted); cost = input, '
            f'cache reads and writes, output (compactor calls included) at {_cost_basis(group, prices)}; pairs by '
            'seed and variant.'
        )
        if carried := sorted({(r['strategy'], r[CARRIED_FROM]) for r in group if CARRIED_FROM in r}):
            meta += (
                ' '
                + ', '.join(f'`{name}`' for name, _ in carried)
                + ' made no summary request, so '
                + ('its' if len(carried) == 1 else 'their')
                + ' runs at summary cap '
                + ', '.join(sorted({str(cap) for _, cap in carried}))
                + ' hold at this cap too.'
            )
        present = {r['strategy'] for r in group}
        chosen = baseline if baseline in present else None
        rows = build_rows(group, baseline=chosen, prices=prices)
        if any(row.errors for row in rows):
            meta += (
                ' Runs that failed on an error count as not passed and in the pairs, but not in the medians: '
                'an error ended them early, so what they spent is less than a run costs.'
            )
        sections.append('\n\n'.join([title, meta, markdown_table(rows, baseline=chosen)]))
        if model == 'reference':
            sections.append(f'_{DISCLAIMER}_')
    sections.extend(sensitivity_tables(records))
    if errors := run_errors(records):
        sections.append(errors)
    if settings := configurations(records):
        sections.append(settings)
    return '\n\n'.join(sections) + '\n'


def run_errors(records: Sequence[Record]) -> str:
    """Which runs ended in an error: failed runs (in the tables as not passed) and missing ones (left out of them).

    Runs stopped by the request limit are only counted: the limit is part of the task, and its message is the same.
    """
    failed = [r for r in records if r['status'] == 'ok' and 'agent_error' in (r.get('problems') or ())]
    limited = sum(1 for r in records if r['status'] == 'ok' and 'request_limit' in (r.get('problems') or ()))
    missing = [r for r in records if r['status'] != 'ok']
    if not failed and not missing and not limited:
        return ''
    lines = ['### Runs that ended in an error', '']
    if limited:
        lines.append(f'{limited} of {len(records)} runs hit the request limit (counted as not passed).')
    if failed:
        lines.append(
            f'{len(failed)} of {len(records)} runs failed on an error (counted as not passed, and paired as such):'
        )
        lines.extend(f'- {_run_name(r)}: {one_line_error(r["error"])}' for r in failed)
    if missing:
        lines.append(
            f'{len(missing)} of {len(records)} runs are missing after a rerun (left out of the tables and their pairs):'
        )
        lines.extend(f'- {_run_name(r)}: {one_line_error(r.get("error"))}' for r in missing)
    return '\n'.join(lines)


def _run_name(record: Record) -> str:
    return f'{record["task"]} size {record["size"]} {record["variant"]} seed={record["seed"]} {record["strategy"]}'


def one_line_error(error: object, limit: int = 300) -> str:
    """An error text on one line, cut at *limit* characters (a provider's answer can be a page)."""
    text = ' '.join(str(error).split())
    return text if len(text) <= limit else text[: limit - 1] + '…'


def _order(key: GroupKey) -> tuple[Any, ...]:
    """Tables by task, size (numerically), model, then the silent player before the note-taking one."""
    task, size, model, trigger, budget, player, pins, think = key
    return (task, size, model, trigger, budget or 0, player != 'silent', str(player), bool(pins), think)


def sensitivity_tables(records: Sequence[Record]) -> list[str]:
    """Pass counts per strategy across summary budgets and players, one table per task, size and model."""
    groups: dict[SettingKey, list[Record]] = defaultdict(list)
    for record in records:
        if record.get('summary_budget') is not None and record.get('player') is not None:
            groups[setting_key(record)].append(record)
    tables: list[str] = []
    for (task, size, model, trigger, pins, think), group in sorted(groups.items()):
        columns = sorted({(r['player'], r['summary_budget']) for r in group}, key=lambda c: (c[0] != 'silent', c))
        if len(columns) < 2:
            continue
        cells: dict[tuple[str, tuple[str, int]], list[bool]] = defaultdict(list)
        for record in group:
            if record['status'] == 'ok':
                cells[(record['strategy'], (record['player'], record['summary_budget']))].append(bool(record['passed']))
        passes: dict[str, int] = defaultdict(int)
        for (name, _), outcomes in cells.items():
            passes[name] += sum(outcomes)
        strategies = sorted({r['strategy'] for r in group}, key=lambda name: (-passes[name], name))
        header = ['strategy', *(f'{player} {budget}' for player, budget in columns)]
        lines = ['| ' + ' | '.join(header) + ' |', '|' + '|'.join('---' for _ in header) + '|']
        carried = False
        for name in strategies:
            row = [name]
            # A strategy that made no summary request in any run cannot depend on the cap: its result at the
            # cap it ran with holds for every cap of the same player.
            free = summary_free(r for r in group if r['strategy'] == name)
            for player, budget in columns:
                outcomes = cells.get((name, (player, budget)), [])
                if not outcomes and free:
                    ran = [v for (n, (p, _)), v in cells.items() if n == name and p == player]
                    if ran:
                        outcomes, carried = ran[0], True
                        row.append(f'{sum(outcomes)}/{len(outcomes)}*')
                        continue
                row.append(f'{sum(outcomes)}/{len(outcomes)}' if outcomes else '–')
            lines.append('| ' + ' | '.join(row) + ' |')
        seeds = sorted({r['seed'] for r in group})
        variants = sorted({r['variant'] for r in group})
        title = f'### Sensitivity: {task}, size {size}, model {model}, trigger {trigger:,}'
        title += (', anchors pin markers' if pins else '') + (f', {think:,} reasoning tokens a step' if think else '')
        caption = (
            f"Passes per strategy for each player (silent: tool calls only; notes: a note of each log's notable "
            f'lines beside its call) and summary cap in tokens; {len(seeds)} seeds × {len(variants)} variant(s) per '
            'cell (few, so that the grid runs in minutes; `--seeds` takes more).'
        )
        if carried:
            caption += ' `*`: the strategy made no summary request, so its result at the main cap holds at every cap.'
        tables.append('\n\n'.join([title, caption, '\n'.join(lines)]))
    return tables


def configurations(records: Sequence[Record]) -> str:
    """Each strategy's recorded configuration, one line per distinct setting."""
    from pydantic_ai_compaction_bench.runner import SOURCE
    from pydantic_ai_compaction_bench.strategies import settings_line

    seen: dict[str, list[str]] = defaultdict(list)
    for record in records:
        described = record.get('strategy_settings')
        if described is None:
            continue
        line = settings_line(described)
        if line not in seen[record['strategy']]:
            seen[record['strategy']].append(line)
    if not seen:
        return ''
    lines = ['### Configurations (as recorded)', '']
    for name in sorted(seen):
        lines.extend(f'- `{name}`: `{line}`' for line in seen[name])
    recorded = [cast('dict[str, object]', v) for r in records if isinstance(v := r.get('versions'), dict)]
    sources = sorted({str(v.get(SOURCE)) for v in recorded})
    if len(sources) > 1:
        lines.append('')
        lines.append(
            f"Runs of {len(sources)} states of the library's code share these tables (source digests "
            f'{", ".join(sources)}).'
        )
    rules = sorted(
        {re.sub(r'cap \d+', "each table's summary cap", r['summary_rule']) for r in records if r.get('summary_rule')}
    )
    if rules:
        lines.append('')
        lines.extend(f'Reference summarizer: {rule}.' for rule in rules)
    return '\n'.join(lines)
