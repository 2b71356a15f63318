"""`pai-compaction` as a user meets it: `--version`, help on every option, one-line errors with a nonzero exit."""

from __future__ import annotations

import argparse
from importlib import metadata
from pathlib import Path

import pytest
from pydantic_ai_compaction_bench import cli
from pydantic_ai_compaction_bench.report import write_records

from .test_evals_report import record

SMALL = ['bench', 'incident', '--sizes', '6', '--seeds', '1', '--variants', 'owner', '--quiet']


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The single line written to stderr; fails on a traceback or a multi-line message."""
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert 'Traceback' not in captured.err
    assert lines[0].startswith('pai-compaction')
    return lines[0]


def test_version_names_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(['--version'])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out == (
        f'pai-compaction {metadata.version("pydantic-ai-compaction-bench")} '
        f'(pydantic-ai-compaction {metadata.version("pydantic-ai-compaction")}, '
        f'pydantic-ai-slim {metadata.version("pydantic-ai-slim")})'
    )


def test_every_option_has_help_text() -> None:
    parser = cli.build_parser()
    parsers: list[argparse.ArgumentParser] = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers.extend(action.choices.values())  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
    assert len(parsers) == 5
    undocumented = [
        f'{p.prog} {action.dest}'
        for p in parsers
        for action in p._actions
        if not isinstance(action, argparse._SubParsersAction) and not (action.help or '').strip()
    ]
    assert undocumented == []


@pytest.mark.parametrize(
    ('argv', 'message'),
    [
        (['--model', 'nope:x'], 'error: --model nope:x: Unknown model: nope:x'),
        (['--model', 'groq:llama-3'], 'error: --model groq:llama-3: Please install the `groq` package'),
        (['--sizes', '0'], 'error: argument --sizes: must be positive, got 0'),
        (['--sizes', '5'], 'error: --sizes must be at least 6 with a held-out variant (owner), got 5'),
        (['--trigger', '-5'], 'error: argument --trigger: must be positive, got -5'),
        (['--trigger', 'many'], "error: argument --trigger: expected an integer, got 'many'"),
        (['--baseline', 'bogus'], "error: unknown --baseline 'bogus': not among the strategies run (none, fork-json)"),
        (['--concurrency', '0'], 'error: argument --concurrency: must be positive, got 0'),
        (['--think-tokens', '-1'], 'error: argument --think-tokens: must be zero or more, got -1'),
        (['--seeds', 'x'], "error: argument --seeds: invalid seeds value: 'x'"),
        # A mistyped range built a list of 100 million seeds (5 GB, nothing printed) before any run.
        (['--seeds', '1-100000000'], 'error: argument --seeds: at most 10,000 seeds, got 100,000,000'),
    ],
    ids=['unknown-model', 'missing-provider', 'size-zero', 'size-below-minimum', 'negative-trigger', 'bad-trigger',
         'unknown-baseline', 'concurrency', 'think-tokens', 'seeds', 'seed-range'],
)  # fmt: skip
def test_bench_errors_are_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _exit_code(lambda: cli.main([*SMALL, '--strategies', 'none', 'fork-json', '--out', str(tmp_path), *argv]))
    assert code == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / 'incident.jsonl').exists()  # refused before any run


def test_a_missing_api_key_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv('ANTHROPIC_API_KEY', raising=False)
    assert cli.main([*SMALL, '--model', 'anthropic:claude-sonnet-4-6', '--out', str(tmp_path)]) == 2
    assert 'ANTHROPIC_API_KEY' in one_error_line(capsys)


def test_an_unwritable_out_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / 'file'
    blocker.write_text('not a directory')
    assert cli.main([*SMALL, '--strategies', 'none', '--out', str(blocker / 'out')]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f'pai-compaction: error: cannot write records to {blocker / "out" / "incident.jsonl"}: ')


def test_an_out_that_is_a_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    existing = tmp_path / 'results.txt'
    existing.write_text('kept')
    assert cli.main([*SMALL, '--strategies', 'none', '--out', str(existing)]) == 2
    line = one_error_line(capsys)
    expected = f'--out must be a directory for the records and plots, got the file {existing}'
    assert line == f'pai-compaction: error: {expected}'
    assert existing.read_text() == 'kept'


def test_summarize_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / 'missing.jsonl'
    assert cli.main(['summarize', str(missing)]) == 2
    assert one_error_line(capsys) == f'pai-compaction: error: no records file at {missing}'

    assert cli.main(['summarize', str(tmp_path)]) == 2
    assert one_error_line(capsys) == f'pai-compaction: error: {tmp_path} is not a file'

    garbage = tmp_path / 'garbage.jsonl'
    garbage.write_text('not json\n')
    assert cli.main(['summarize', str(garbage)]) == 2
    assert one_error_line(capsys).startswith(f'pai-compaction: error: {garbage} is not a JSONL records file: ')

    records = tmp_path / 'records.jsonl'
    write_records([record('fork-json', 1, True, [100]), record('summary', 1, True, [100])], records)
    assert cli.main(['summarize', str(records), '--baseline', 'native']) == 2
    assert one_error_line(capsys) == (
        f"pai-compaction: error: unknown --baseline 'native': not among the strategies in {records} "
        '(fork-json, summary)'
    )
    # Without --baseline, records without `native` print their tables without a comparison.
    assert cli.main(['summarize', str(records)]) == 0
    assert '| fork-json | 1/1 |' in capsys.readouterr().out


def test_costsim_refuses_zero_steps_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(lambda: cli.main(['costsim', '--steps', '0'])) == 2
    assert one_error_line(capsys) == (
        'pai-compaction costsim: error: argument --steps: must be positive, got 0 (see pai-compaction costsim --help)'
    )


def test_an_unexpected_failure_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> str:
        raise RuntimeError('the table\nbroke')

    monkeypatch.setattr(cli, 'summarize', broken)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    records = tmp_path / 'records.jsonl'
    write_records([record('native', 1, True, [100])], records)
    assert cli.main(['summarize', str(records)]) == 1
    assert one_error_line(capsys) == 'pai-compaction: error: the table broke'
    monkeypatch.setenv(cli.DEBUG_ENV, '1')
    with pytest.raises(RuntimeError, match='the table'):
        cli.main(['summarize', str(records)])


def _exit_code(call: object) -> int:
    """The exit code of *call*, whether it returns one or argparse exits."""
    assert callable(call)
    try:
        return int(call())
    except SystemExit as exit_info:
        return int(exit_info.code or 0)


def test_a_real_model_runs_each_strategy_once_per_seed_not_once_per_player() -> None:
    """The players are the reference model's: a real model ran every strategy twice with the same settings, and
    the two runs shared one table and one baseline per seed."""
    from pydantic_ai_compaction_bench.cli import build_parser, specs_for

    parser = build_parser()
    common = [
        'bench',
        'incident',
        '--sizes',
        '8',
        '--seeds',
        '1,2',
        '--variants',
        'owner',
        '--strategies',
        'none',
        'reset',
    ]
    real = specs_for(parser.parse_args([*common, '--model', 'openai:gpt-5-mini']))
    assert len(real) == 4 and len({(s.strategy, s.seed) for s in real}) == 4
    reference = specs_for(parser.parse_args(common))
    assert sorted({s.player for s in reference}) == ['notes', 'silent'] and len(reference) == 8


def test_the_incident_flags_given_to_the_recall_benchmark_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ignored, the table said "size 1, variant base" and the records `player: silent`: the user believed the
    # note-taking player had run at size 8.
    argv = ['bench', 'recall', '--seeds', '1', '--strategies', 'none', '--out', str(tmp_path)]
    code = _exit_code(lambda: cli.main([*argv, '--variants', 'owner', '--sizes', '8', '--players', 'notes']))
    assert code == 2
    line = one_error_line(capsys)
    assert (
        line
        == "pai-compaction: error: --sizes, --variants, --players: the incident benchmark's, not the recall benchmark's"
    )
    assert not list(tmp_path.iterdir())  # refused before any run


def test_docs_show_the_costsim_tables_as_costsim_prints_them(capsys: pytest.CaptureFixture[str]) -> None:
    # The `score` policy's row was added to the simulator but not to docs/benchmarks.md.
    assert cli.main(['costsim']) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith('|')]
    docs = (Path(__file__).parent.parent / 'docs' / 'benchmarks.md').read_text(encoding='utf-8')
    assert len(printed) > 10 and [line for line in printed if line not in docs] == []


@pytest.mark.parametrize(
    ('extra', 'said'),
    [
        (['--model', 'openai:gpt-5-mini', '--sensitivity-budgets', '300', '800'], '--sensitivity-budgets'),
        (['--model', 'openai:gpt-5-mini', '--summary-budget', '800', '--think-tokens', '400'],
         '--summary-budget, --think-tokens'),
        (['--model', 'openai:gpt-5-mini', '--players', 'notes'], '--players'),
    ],
)  # fmt: skip
def test_the_reference_model_s_knobs_are_refused_for_a_real_model(
    extra: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Accepted, a real model ran `summary` once per cap with the same settings: three records in one table
    # (`summary 0/3` beside `none 0/1`), each a pair of its own in the statistics.
    argv = ['bench', 'incident', '--sizes', '8', '--seeds', '1', '--variants', 'owner', '--strategies', 'none']
    assert _exit_code(lambda: cli.main([*argv, *extra, '--out', str(tmp_path)])) == 2
    assert one_error_line(capsys) == (
        f"pai-compaction: error: {said}: the reference model's, not --model openai:gpt-5-mini's"
    )
    assert not list(tmp_path.iterdir())


def test_the_recall_benchmark_refuses_caps_it_has_no_table_for_and_anchor_pins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ['bench', 'recall', '--seeds', '1', '--strategies', 'none', '--out', str(tmp_path)]
    assert _exit_code(lambda: cli.main([*argv, '--sensitivity-budgets', '100', '--anchor-pins'])) == 2
    assert one_error_line(capsys) == (
        "pai-compaction: error: --sensitivity-budgets, --anchor-pins: the incident benchmark's, not the recall "
        "benchmark's"
    )


def test_concurrency_with_worker_processes_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ['bench', 'incident', '--sizes', '8', '--seeds', '1', '--strategies', 'none', '--out', str(tmp_path)]
    # Accepted, each worker ran one run at a time: `--concurrency 8 --jobs 2` had 2 in flight, not 16.
    assert _exit_code(lambda: cli.main([*argv, '--concurrency', '8', '--jobs', '2'])) == 2
    assert one_error_line(capsys).startswith('pai-compaction: error: --concurrency with --jobs: each worker process')


def test_summarize_shows_the_main_tables_at_the_cap_bench_ran_them_at(tmp_path: Path) -> None:
    from pydantic_ai_compaction_bench.report import summarize

    def at(strategy: str, seed: int, budget: int) -> dict[str, object]:
        return {**record(strategy, seed, True, [100]), 'summary_budget': budget, 'player': 'silent'}

    # `bench --summary-budget 800 --sensitivity-budgets 500`: `none` and `reset` ran at 800 only.
    records = [at(name, seed, 800) for name in ('none', 'reset', 'summary') for seed in (1, 2)]
    records += [at('summary', seed, 500) for seed in (1, 2)]
    table = summarize(records, baseline='none')
    # Before: cap 500 (the default), a main table without `none` and `reset`.
    assert '### incident, size 8, model reference, player silent, summary cap 800' in table
    assert 'summary cap 500\n' not in table
    assert '| none | 2/2 |' in table and '| reset | 2/2 |' in table


def test_runs_at_other_reasoning_tokens_are_tables_of_their_own() -> None:
    from pydantic_ai_compaction_bench.report import summarize

    records = [{**record('summary', seed, True, [100]), 'think_tokens': 0} for seed in (1, 2)]
    records += [{**record('summary', seed, False, [100]), 'think_tokens': 400} for seed in (1, 2)]
    table = summarize(records, baseline=None)
    # Before: one table of `summary 2/4` saying "2 seeds".
    assert table.count('| summary | 2/2 |') == 1 and table.count('| summary | 0/2 |') == 1
    assert '### incident, size 8, model reference, 400 reasoning tokens a step' in table


def test_runs_at_two_triggers_are_plotted_apart(tmp_path: Path) -> None:
    pytest.importorskip('matplotlib')
    from pydantic_ai_compaction_bench.plots import plot

    records = [{**record('summary', seed, True, [100]), 'trigger_tokens': 18_000} for seed in (1, 2)]
    records += [{**record('summary', seed, True, [100, 200]), 'trigger_tokens': 30_000} for seed in (1, 2)]
    written = sorted(path.name for path in plot(records, tmp_path))
    # Before: one figure whose points were the medians of both triggers' runs together.
    assert written == [
        'incident-8-reference-trigger18000-pass-rate.png',
        'incident-8-reference-trigger18000-prompt-tokens.png',
        'incident-8-reference-trigger30000-pass-rate.png',
        'incident-8-reference-trigger30000-prompt-tokens.png',
    ]


def test_costsim_without_reasoning_says_there_is_no_break_even_and_prints_every_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: half the output, then exit 1 with `error: break_even_multiplier: ...`, naming no option.
    assert cli.main(['costsim', '--reasoning', '0']) == 0
    out = capsys.readouterr().out
    assert 'With --reasoning 0, dropping reasoning changes no bill: no break-even.' in out
    assert '| late (90%) |' in out  # the compaction-threshold table after it


def test_summarize_names_what_a_line_that_is_no_record_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / 'records.jsonl'
    path.write_text('{"strategy": "x"}\n', encoding='utf-8')
    assert cli.main(['summarize', str(path)]) == 2  # before: exit 1, `error: 'status'`
    assert one_error_line(capsys) == (
        f'pai-compaction: error: {path} is not a records file of pai-compaction bench (line 1 has no task, seed, '
        'variant, size, model, status, passed, applied, probe, requests)'
    )


def test_summarize_prints_what_bench_printed_when_no_strategy_ran_without_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ['bench', 'incident', '--strategies', 'summary', '--sizes', '8', '--seeds', '101', '--variants', 'owner']
    argv += ['--players', 'silent', '--summary-budget', '800', '--sensitivity-budgets', '300', '--quiet']
    assert cli.main([*argv, '--out', str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split('\nRecords: ')[0]
    assert '### incident, size 8, model reference, player silent, summary cap 800' in printed
    assert cli.main(['summarize', str(tmp_path / 'incident.jsonl')]) == 0
    # Before: the main table at cap 300 (the smallest of two caps run as often), not bench's 800.
    assert capsys.readouterr().out.rstrip() == printed.rstrip()


@pytest.mark.parametrize(
    ('line', 'said'),
    [
        ({'applied': None}, 'line 1 has no applied'),
        ({'requests': [{'input_tokens': 1}]}, 'line 1: a request has no kind, cache_read_tokens'),
    ],
)
def test_summarize_names_what_a_record_the_tables_read_lacks(
    line: dict[str, object], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / 'records.jsonl'
    whole = record('none', 1, True, [100])
    broken = {**whole, **line}
    if 'applied' in line:
        del broken['applied']
    write_records([broken], path)
    assert cli.main(['summarize', str(path)]) == 2  # before: `error: 'applied'`, `error: 'kind'`
    assert said in one_error_line(capsys)


def test_summarize_after_a_resume_at_another_main_cap_prints_what_the_resumed_bench_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ['bench', 'incident', '--strategies', 'none', 'summary', '--sizes', '8', '--seeds', '101']
    argv += ['--variants', 'owner', '--players', 'silent', '--quiet', '--out', str(tmp_path)]
    assert cli.main([*argv, '--summary-budget', '120', '--sensitivity-budgets', '60']) == 0
    capsys.readouterr()
    assert cli.main([*argv, '--summary-budget', '60', '--sensitivity-budgets', '120', '--resume']) == 0
    printed = capsys.readouterr().out.split('\nRecords: ')[0]
    assert '### incident, size 8, model reference, player silent, summary cap 60' in printed
    assert cli.main(['summarize', str(tmp_path / 'incident.jsonl')]) == 0
    # Before: the main tables at cap 120, the older run's. (The sensitivity grid holds every run of the file, the
    # older invocation's `none` at 120 too, where `bench` shows the runs it was asked for.)
    main = capsys.readouterr().out.split('### Sensitivity')[0]
    assert main == printed.split('### Sensitivity')[0]


def test_a_value_given_twice_runs_once() -> None:
    # `--sizes 8 8` ran every run twice; the table counted the pairs once and the records held both.
    from pydantic_ai_compaction_bench.cli import build_parser, specs_for

    parser = build_parser()
    args = ['bench', 'incident', '--seeds', '1', '--strategies', 'none', '--sizes', '8', '8', '6']
    twice = specs_for(parser.parse_args([*args, '--variants', 'owner', 'owner', '--players', 'notes', 'notes']))
    assert [(s.size, s.variant, s.player) for s in twice] == [(8, 'owner', 'notes'), (6, 'owner', 'notes')]


def test_an_audit_too_large_to_generate_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Near 6,800 logs the generator runs out of incident ids and searched for a free one for ever.
    from pydantic_ai_compaction_bench.tasks import incident

    argv = ['bench', 'incident', '--seeds', '1', '--strategies', 'none', '--out', str(tmp_path), '--sizes', '7000']
    assert _exit_code(lambda: cli.main(argv)) == 2
    assert 'argument --sizes: must be at most 2,000 logs, got 7,000' in capsys.readouterr().err
    assert not (tmp_path / 'incident.jsonl').exists()
    with pytest.raises(ValueError, match='n_logs must be at most 2,000, got 2,001'):
        incident.generate(1, incident.MAX_LOGS + 1, 'owner')
    largest = incident.generate(1, incident.MAX_LOGS, 'owner', log_tokens=200)
    assert len(largest.logs) == incident.MAX_LOGS


def test_prices_of_the_wrong_length_say_how_many_were_given(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ['bench', 'incident', '--seeds', '1', '--prices', '1,2,3']
    assert _exit_code(lambda: cli.main(argv)) == 2
    assert "--prices takes 4 numbers, input,cache_read,cache_write,output; got 3 in '1,2,3'" in capsys.readouterr().err
