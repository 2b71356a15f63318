"""Records to tables with no model calls; the CLI end to end on a small run."""

from __future__ import annotations

from pathlib import Path

from pydantic_ai_compaction.evals import cli
from pydantic_ai_compaction.evals.report import build_rows, read_records, summarize, write_records


def record(strategy: str, seed: int, passed: bool, inputs: list[int]) -> dict[str, object]:
    return {
        'task': 'incident', 'strategy': strategy, 'seed': seed, 'variant': 'owner', 'size': 8, 'model': 'reference',
        'status': 'ok', 'passed': passed, 'applied': passed, 'probe': True,
        'requests': [
            {'kind': 'agent', 'input_tokens': n, 'cache_read_tokens': n // 2, 'cache_write_tokens': n - n // 2,
             'output_tokens': 10, 'cache_detail': True}
            for n in inputs
        ],
        'compactions': [],
    }  # fmt: skip


def test_tables_rebuild_from_records_alone(tmp_path: Path) -> None:
    records = [record('fork-json', seed, True, [1000, 2000]) for seed in range(30)]
    records += [record('native', seed, seed >= 11 or seed < 2, [1000, 1500]) for seed in range(30)]
    # fork passes all 30; native fails seeds 2..10 (9 discordant pairs), passes 21.
    path = tmp_path / 'records.jsonl'
    write_records(records, path)
    again = read_records(path)
    assert again == records
    rows = {row.strategy: row for row in build_rows(again, baseline='native')}
    fork = rows['fork-json']
    assert (fork.passed, fork.cumulative_input, fork.peak_prompt) == (30, 3000, 2000)
    assert fork.p_one_sided is not None and round(fork.p_one_sided, 4) == round(1 / 512, 4)
    assert fork.interval is not None and fork.interval[0] > 0
    table = summarize(again, baseline='native')
    assert '| fork-json | 30/30 |' in table and 'information flow' in table


def test_cli_bench_writes_records_plots_and_table(tmp_path: Path, capsys: object) -> None:
    code = cli.main([
        'bench', 'incident', '--sizes', '6', '--seeds', '1', '--variants', 'owner', '--strategies', 'native',
        'reassert', 'harness-sliding', '--out', str(tmp_path), '--quiet',
    ])  # fmt: skip
    assert code == 0
    records = read_records(tmp_path / 'incident.jsonl')
    assert {r['strategy'] for r in records} == {'native', 'reassert', 'harness-sliding'}
    assert (tmp_path / 'plots' / 'incident-6-reference-pass-vs-input.png').stat().st_size > 1000
    output = capsys.readouterr().out  # type: ignore[attr-defined]
    assert '| reassert |' in output and 'p one-sided vs native' in output
    assert cli.main(['summarize', str(tmp_path / 'incident.jsonl')]) == 0


def test_seed_ranges() -> None:
    assert cli.seeds('101-103') == [101, 102, 103]
    assert cli.seeds('1,4,9') == [1, 4, 9]


def test_recall_compare_prints_both_search_tools(capsys: object) -> None:
    assert cli.main(['recall-compare', '--seeds', '1']) == 0
    output = capsys.readouterr().out  # type: ignore[attr-defined]
    ours = next(line for line in output.splitlines() if line.startswith('| recall'))
    theirs = next(line for line in output.splitlines() if line.startswith('| harness'))
    # Every question's value is found by word match against the line and its call.
    assert ours.split('|')[2].strip() == ours.split('|')[3].strip() == '12'
    assert int(theirs.split('|')[3]) <= 12


def test_savings_target_is_judged_from_records() -> None:
    from pydantic_ai_compaction.evals import savings

    records = [record('none', seed, True, [1000, 40_000]) for seed in range(3)]
    records += [record('summary', seed, True, [1000, 4_000]) for seed in range(3)]
    records += [record('native', seed, False, [1000, 3_000]) for seed in range(3)]
    for anchor in ('harness-clear', 'harness-sliding', 'harness-summarizing', 'harness-tiered'):
        records += [record(anchor, seed, False, [1000, 2_000]) for seed in range(3)]
    verdict = savings.target(records)
    # summary reaches none's pass rate with 5,000 against 41,000 input tokens: 88 % less, and cheaper.
    assert verdict.startswith("Best strategy at no-compaction's pass rate (3/3): summary, 88% less")
    assert verdict.endswith(': met.')
    table = savings.table(records)
    assert '| summary | none | 3/3 | 3/3 | 0.12× |' in table
