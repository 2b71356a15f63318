"""Records to tables with no model calls; the CLI end to end on a small run."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic_ai_compaction_bench import cli
from pydantic_ai_compaction_bench.report import build_rows, read_records, summarize, write_records
from pydantic_ai_compaction_bench.runner import SOURCE, source_digest


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


BENCH = ['bench', 'incident', '--sizes', '6', '--seeds', '1', '--variants', 'owner', '--quiet']


def test_cli_bench_writes_records_plots_and_table(tmp_path: Path, capsys: object) -> None:
    code = cli.main([*BENCH, '--strategies', 'native', 'reassert', 'harness-sliding', '--out', str(tmp_path)])
    assert code == 0
    records = read_records(tmp_path / 'incident.jsonl')
    assert {r['strategy'] for r in records} == {'native', 'reassert', 'harness-sliding'}
    assert {r['player'] for r in records} == {'silent', 'notes'} and len(records) == 6
    for name in ('pass-rate', 'prompt-tokens'):
        assert (tmp_path / 'plots' / f'incident-6-reference-{name}.png').stat().st_size > 1000
    output = capsys.readouterr().out  # type: ignore[attr-defined]
    assert '| reassert |' in output and 'p one-sided vs native' in output
    # Every table comes back from the records alone, identical to what the run printed.
    assert cli.main(['summarize', str(tmp_path / 'incident.jsonl')]) == 0
    again = capsys.readouterr().out  # type: ignore[attr-defined]
    assert again == output[: output.index('Records: ')]
    # Each record carries its whole configuration, the strategy's settings and the versions.
    sliding = next(r for r in records if r['strategy'] == 'harness-sliding')
    assert sliding['config'] == {
        'task': 'incident', 'strategy': 'harness-sliding', 'seed': 1, 'variant': 'owner', 'size': 6,
        'model': 'reference', 'trigger_tokens': 18_000, 'summary_budget': 500, 'request_limit': 200,
        'think_tokens': 0, 'player': sliding['player'], 'anchor_pins': False,
    }  # fmt: skip
    assert sliding['strategy_settings'] == {
        'class': 'SlidingWindowCompaction', 'max_tokens': 18_000, 'keep_tokens': 6_000,
    }  # fmt: skip
    assert set(sliding['versions']) == {'pydantic-ai-compaction', 'pydantic-ai-slim', 'pydantic-ai-harness', SOURCE}
    assert re.fullmatch('[0-9a-f]{16}', sliding['versions'][SOURCE])
    assert 'cap 500' in sliding['summary_rule']


def test_records_are_never_overwritten_silently(tmp_path: Path, capsys: object) -> None:
    args = [*BENCH, '--players', 'silent', '--strategies', 'native', '--out', str(tmp_path)]
    assert cli.main(args) == 0
    path = tmp_path / 'incident.jsonl'
    first = path.read_bytes()
    capsys.readouterr()  # type: ignore[attr-defined]
    assert cli.main(args) == 2
    error = capsys.readouterr().err  # type: ignore[attr-defined]
    assert error.strip().count('\n') == 0 and '--resume' in error and '--overwrite' in error
    assert path.read_bytes() == first
    # Resume runs only what is missing: the native run is kept byte for byte, reassert is added.
    assert cli.main([*args[:-4], '--strategies', 'native', 'reassert', '--out', str(tmp_path), '--resume']) == 0
    lines = path.read_bytes().splitlines(keepends=True)
    assert lines[0] == first and len(lines) == 2
    assert cli.main([*args, '--overwrite']) == 0
    assert len(read_records(path)) == 1


def test_runs_of_other_code_are_not_resumed_into_the_same_file(tmp_path: Path, capsys: object) -> None:
    args = [*BENCH, '--players', 'silent', '--strategies', 'native', '--out', str(tmp_path)]
    assert cli.main(args) == 0
    path = tmp_path / 'incident.jsonl'
    (record,) = read_records(path)
    # The same version number, another state of the code (a default changed under 0.1.0).
    path.unlink()
    write_records([{**record, 'versions': {**record['versions'], SOURCE: '0123456789abcdef'}}], path)
    kept = path.read_bytes()
    capsys.readouterr()  # type: ignore[attr-defined]
    assert cli.main([*args[:-4], '--strategies', 'native', 'reassert', '--out', str(tmp_path), '--resume']) == 2
    error = capsys.readouterr().err  # type: ignore[attr-defined]
    assert error.count('\n') == 1 and '1 run(s) made with other code' in error
    assert f'pydantic-ai-compaction source 0123456789abcdef there, {source_digest()} here' in error
    assert '--overwrite' in error and path.read_bytes() == kept
    # A file that holds runs of both anyway (concatenated by hand) says so under its tables.
    write_records([{**record, 'seed': 2, 'config': {**record['config'], 'seed': 2}}], path)
    assert cli.main(['summarize', str(path)]) == 0
    digests = ', '.join(sorted(['0123456789abcdef', source_digest()]))
    said = f"Runs of 2 states of the library's code share these tables (source digests {digests})."
    assert said in capsys.readouterr().out  # type: ignore[attr-defined]
    # Records of this code resume as before.
    path.unlink()
    write_records([record], path)
    assert cli.main([*args[:-4], '--strategies', 'native', 'reassert', '--out', str(tmp_path), '--resume']) == 0
    assert len(read_records(path)) == 2


def test_an_unwritable_out_fails_before_the_first_run(tmp_path: Path, capsys: object) -> None:
    blocker = tmp_path / 'file'
    blocker.write_text('not a directory')
    assert cli.main([*BENCH, '--strategies', 'native', '--out', str(blocker / 'out')]) == 2
    captured = capsys.readouterr()  # type: ignore[attr-defined]
    assert captured.err.startswith('pai-compaction: error: cannot write records to ') and captured.err.count('\n') == 1
    assert captured.out == ''  # no table: nothing ran


def test_the_sensitivity_grid_runs_summarizing_strategies_at_every_cap(tmp_path: Path, capsys: object) -> None:
    args = [*BENCH, '--players', 'silent', '--strategies', 'summary', 'harness-clear', '--out', str(tmp_path)]
    assert cli.main([*args, '--sensitivity-budgets', '100', '800']) == 0
    records = read_records(tmp_path / 'incident.jsonl')
    ran = sorted((r['strategy'], r['summary_budget']) for r in records)
    # harness-clear never asks for a summary: it runs at the main cap only, and its result is carried across.
    assert ran == [('harness-clear', 500), ('summary', 100), ('summary', 500), ('summary', 800)]
    output = capsys.readouterr().out  # type: ignore[attr-defined]
    table = output[output.index('### Sensitivity') :]
    assert '| strategy | silent 100 | silent 500 | silent 800 |' in table
    clear = next(line for line in table.splitlines() if line.startswith('| harness-clear |'))
    assert clear.count('*') == 2


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
    from pydantic_ai_compaction_bench import savings

    records = [record('none', seed, True, [1000, 40_000]) for seed in range(3)]
    records += [record('summary', seed, True, [1000, 4_000]) for seed in range(3)]
    records += [record('native', seed, False, [1000, 3_000]) for seed in range(3)]
    for anchor in ('harness-clear', 'harness-sliding', 'harness-summarizing', 'harness-tiered'):
        records += [record(anchor, seed, False, [1000, 2_000]) for seed in range(3)]
    verdict = savings.target(records)
    # summary reaches the best pass rate at 5,000 against 41,000 input tokens, half read, half written:
    # $0.00670 against $0.0535 a run (87 % less), and no anchor reaches that rate.
    assert verdict.startswith('Best pass rate (3/3): cheapest of ours is summary at $0.007 a run, 87% less')
    assert '(no anchor reaches it)' in verdict
    assert verdict.endswith('Target: met.')
    table = savings.table(records)
    assert '| summary | none | 3/3 | 3/3 | 0.12× |' in table
    # An anchor at the same rate that costs less makes the target fail, however much less than none we cost.
    cheap = [record('harness-tiered', seed, True, [1000, 1_500]) for seed in range(3)]
    records = [r for r in records if r['strategy'] != 'harness-tiered'] + cheap
    assert savings.target(records).endswith('not less than every harness anchor at that rate '
                                            '(harness-tiered $0.003); 88% less input. With the probe turn (asked '
                                            'after grading, not the task): 87% less ($0.007 against $0.053). '
                                            'Target: not met.')  # fmt: skip


def test_cost_table_splits_the_bill_and_sets_the_probe_apart() -> None:
    from pydantic_ai_compaction_bench import savings

    records = [record('none', seed, True, [1000, 40_000, 40_000]) for seed in range(2)]
    records += [record('reset', seed, seed == 0, [1000, 4_000, 4_000]) for seed in range(2)]
    for r in records:
        r['requests'][-1]['probe'] = True  # type: ignore[index]
    rows = savings.cost_rows(records)
    none, reset = rows['none'], rows['reset']
    # none's task: 20,500 read at $0.10 and 20,500 written at $2.50 per million, 20 output tokens at $10. The probe
    # turn, asked after grading, is not the task's cost: it is shown apart, and in the bill with it.
    assert round(none.cost, 6) == round(20_500 * 0.1e-6 + 20_500 * 2.5e-6 + 20 * 10e-6, 6)
    assert round(none.probe_cost, 6) == round(20_000 * 2.6e-6 + 10 * 10e-6, 6)
    assert round(none.bill, 6) == round(40_500 * 0.1e-6 + 40_500 * 2.5e-6 + 30 * 10e-6, 6)
    assert round(none.cost + none.probe_cost, 9) == round(none.bill, 9)
    # One pass of two runs: cost per pass is both runs' task bills over one pass.
    assert reset.passed == 1 and round(reset.cost_per_pass, 9) == round(2 * reset.cost, 9)
    assert (none.read, none.write, none.uncached) == (20_500, 20_500, 0)
    line = next(row for row in savings.cost_table(records).splitlines() if row.startswith('| reset |'))
    assert line.startswith('| reset | 1/2 | $0.007 | $0.013 | 0.13× | 2,500 | 2,500 | 0 | 20 | $0.000 | $0.006 |')
    assert line.endswith('| $0.012 | 0.11× |')  # the bill with the probe turn, and its ratio to none's


def test_our_clearing_view_is_a_row_of_the_savings_tables_and_can_win_the_target() -> None:
    from pydantic_ai_compaction_bench import savings

    # The savings runs `clear` with the same seeds and variants as every other strategy.
    ran = {spec.strategy for spec in savings.specs()}
    assert 'clear' in ran and 'reset' in ran and 'harness-tiered' in ran
    assert sum(spec.strategy == 'clear' for spec in savings.specs()) == 9
    records = [record('none', seed, True, [1000, 40_000]) for seed in range(3)]
    records += [record('reset', seed, True, [1000, 4_000]) for seed in range(3)]
    records += [record('clear', seed, True, [1000, 2_000]) for seed in range(3)]
    records += [record('harness-tiered', seed, True, [1000, 2_500]) for seed in range(3)]
    table = savings.table(records)
    # 3,000 against 41,000 and against harness-tiered's 3,500 input tokens.
    assert '| clear | none | 3/3 | 3/3 | 0.07× |' in table
    assert '| clear | harness-tiered | 3/3 | 3/3 | 0.86× |' in table
    line = next(row for row in savings.cost_table(records).splitlines() if row.startswith('| clear |'))
    assert line.startswith('| clear | 3/3 | $0.004 |')
    # Cheaper than the reset and than the anchor at the same rate: it is the strategy the target names.
    assert savings.target(records).startswith('Best pass rate (3/3): cheapest of ours is clear at $0.004 a run')
    assert savings.target(records).endswith('Target: met.')


def test_every_strategy_has_its_own_colour_and_marker_and_markers_do_not_overlap() -> None:
    from pydantic_ai_compaction_bench import strategies
    from pydantic_ai_compaction_bench.plots import dodge, style

    styles = [style(name) for name in strategies.ALL]
    assert len({colour for colour, _ in styles}) == len({marker for _, marker in styles}) == len(strategies.ALL)
    # Two strategies at the same pass rate and nearly the same cost are drawn apart; a third one far away is not.
    nudges = dodge([(0.600, 0.0), (0.601, 0.0), (1.4, 0.0), (0.600, 1.0)])
    assert nudges[0] != nudges[1] and nudges[2] == 0.0 and nudges[3] == 0.0
    assert abs(nudges[0] - nudges[1]) >= 0.04


def test_the_probe_turn_is_marked_apart_from_the_task() -> None:
    import asyncio

    from pydantic_ai_compaction_bench.runner import RunSpec, run_with_rerun

    record = asyncio.run(run_with_rerun(RunSpec('incident', 'none', 101, 'owner', 6)))
    marks = [bool(q['probe']) for q in record['requests']]
    # Six reads and the report are the task; the one request after grading is the probe.
    assert marks == [False] * 7 + [True]
    probe = record['requests'][-1]
    # The probe changes the tool definitions (text output), so no compaction writes its whole history again.
    assert probe['cache_read_tokens'] == 0 and probe['cache_write_tokens'] == probe['input_tokens'] > 40_000


def test_the_table_s_medians_are_the_task_s_and_leave_the_probe_turn_out() -> None:
    records = [record('none', seed, True, [1000, 40_000, 44_000]) for seed in range(2)]
    records += [record('reset', seed, True, [1000, 4_000, 41_000]) for seed in range(2)]
    for r in records:
        r['requests'][-1]['probe'] = True  # type: ignore[index]
    rows = {row.strategy: row for row in build_rows(records, baseline='none')}
    # The probe, asked after grading without the output tool, misses the cache whole: counted, it weighed most on
    # the run with the largest context and made strategies that kept less read cheaper than no compaction.
    assert (rows['none'].requests, rows['none'].cumulative_input, rows['none'].final_prompt) == (2, 41_000, 40_000)
    assert (rows['reset'].requests, rows['reset'].cumulative_input, rows['reset'].peak_prompt) == (2, 5_000, 4_000)
    assert round(rows['none'].cost.high, 6) == round(20_500 * 2.6e-6 + 20 * 10e-6, 6)
    assert 'the probe turn, asked after grading, is not counted' in summarize(records, baseline='none')


def test_a_compaction_the_probe_turn_triggers_is_the_probe_s_on_a_real_model_too() -> None:
    import asyncio

    from pydantic_ai_compaction_bench.reference.incident import IncidentPlayer
    from pydantic_ai_compaction_bench.reference.model import ReferenceModel
    from pydantic_ai_compaction_bench.runner import REFERENCE, RunSpec, run_incident

    def compactor_rows(record: dict[str, object]) -> list[tuple[int, bool]]:
        requests: list[dict[str, object]] = record['requests']  # type: ignore[assignment]
        return [(int(q['input_tokens']), bool(q['probe'])) for q in requests if q['kind'] == 'compactor']  # type: ignore[arg-type]

    # At a 27,500 trigger the task compacts once and the probe turn once more.
    spec = RunSpec('incident', 'summary', 101, 'owner', 8, model=REFERENCE, trigger_tokens=27_500)
    reference = asyncio.run(run_incident(spec))
    # A model object takes the real-model path: usage recorded per request, the compactor's read from its events.
    model = ReferenceModel(IncidentPlayer(notes=False), summary_budget=500).model()
    real = asyncio.run(
        run_incident(RunSpec('incident', 'summary', 101, 'owner', 8, model=model, trigger_tokens=27_500))
    )
    assert [probe for _, probe in compactor_rows(reference)] == [False, True]
    # Before: `[False, False]`, the probe's summary billed to the task on a real model only.
    assert compactor_rows(real) == compactor_rows(reference)


def test_an_interval_the_exact_test_does_not_back_is_marked() -> None:
    # Two seeds, fork passes both and native neither: Newcombe's interval reads +7 to +100 points, but the exact
    # two-sided test gives p = 0.5. A reader taking the interval at its word would call it shown.
    few = [record('fork-json', seed, True, [1000]) for seed in range(2)]
    few += [record('native', seed, False, [1000]) for seed in range(2)]
    fork = {row.strategy: row for row in build_rows(few, baseline='native')}['fork-json']
    assert fork.interval is not None and fork.interval[0] > 0 and fork.p_two_sided == 0.5
    table = summarize(few, baseline='native')
    assert '+7 to +100 †' in table and '† The interval excludes zero but the exact test does not' in table
    # Seven of seven discordant pairs: both agree (p = 0.016), and nothing is marked.
    many = [record('fork-json', seed, True, [1000]) for seed in range(7)]
    many += [record('native', seed, False, [1000]) for seed in range(7)]
    assert '†' not in summarize(many, baseline='native')
