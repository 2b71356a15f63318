"""One table, one price sheet: a resume at other prices is refused, and so is a summary over runs priced apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_evals_cli import cost_cells

pytestmark = pytest.mark.bench

BENCH = [
    'bench', 'incident', '--sizes', '6', '--variants', 'owner', '--strategies', 'none', 'summary',
    '--players', 'silent', '--quiet',
]  # fmt: skip

REFERENCE_SHEET = '$2 input, $0.1 cache read, $2.5 cache write, $10 output per million tokens'
"""The reference model's prices (`REFERENCE_PRICES`) as tables and errors name them."""

OTHER = '100,10,100,400'
"""Prices other than the reference model's, as `--prices` takes them."""

OTHER_SHEET = '$100 input, $10 cache read, $100 cache write, $400 output per million tokens'
"""`OTHER` as tables and errors name them."""


@pytest.fixture(autouse=True)
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read tables, records and errors, not plots."""
    from pydantic_ai_compaction_bench import cli

    def skip(records: object, directory: Path, **options: object) -> list[Path]:
        return []

    monkeypatch.setattr(cli, 'plot', skip)


def header(output: str) -> str:
    """The line under the main table's title that says what the costs are priced at."""
    return next(line for line in output.splitlines() if ' seeds × ' in line and 'cost = ' in line)


def test_a_resume_at_other_prices_is_refused_naming_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.report import read_records

    path = tmp_path / 'incident.jsonl'
    assert cli.main([*BENCH, '--seeds', '101', '--out', str(tmp_path)]) == 0
    capsys.readouterr()
    before = path.read_bytes()

    assert cli.main([*BENCH, '--seeds', '101-102', '--resume', '--prices', OTHER, '--out', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f'holds runs of reference priced at {REFERENCE_SHEET} (2 runs)' in err
    assert f'this run would price its runs at {OTHER_SHEET}' in err
    assert 'pass --prices 2,0.1,2.5,10 to add runs at them' in err
    assert path.read_bytes() == before  # refused before any run: nothing added

    # With the file's prices the resume adds the missing seed, every run at one sheet.
    assert cli.main([*BENCH, '--seeds', '101-102', '--resume', '--prices', '2,0.1,2.5,10', '--out', str(tmp_path)]) == 0
    records = read_records(path)
    assert sorted((r['seed'], r['strategy']) for r in records) == [
        (101, 'none'), (101, 'summary'), (102, 'none'), (102, 'summary')
    ]  # fmt: skip
    assert {tuple(r['prices'].values()) for r in records} == {(2.0, 0.1, 2.5, 10.0)}
    # And without --prices too: the reference model's own prices are the file's.
    assert cli.main([*BENCH, '--seeds', '101-103', '--resume', '--out', str(tmp_path)]) == 0
    assert len(read_records(path)) == 6


def test_a_summary_over_runs_priced_apart_is_refused_naming_each_sheet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.report import read_records, summarize, write_records

    assert cli.main([*BENCH, '--seeds', '101-102', '--out', str(tmp_path)]) == 0
    at_reference = cost_cells(capsys.readouterr().out)
    records = read_records(tmp_path / 'incident.jsonl')
    # One run priced at another sheet, as a second invocation with other prices used to append it.
    other = {'input': 100.0, 'cache_read': 10.0, 'cache_write': 100.0, 'output': 400.0}  # OTHER
    mixed = [{**r, 'prices': other} if (r['seed'], r['strategy']) == (102, 'summary') else r for r in records]
    path = tmp_path / 'mixed.jsonl'
    write_records(mixed, path)

    assert cli.main(['summarize', str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ''  # no table at all rather than a median of two sheets
    assert f'runs of reference are priced at {REFERENCE_SHEET} (3 runs); {OTHER_SHEET} (1 run)' in captured.err
    assert 'pass --prices' in captured.err
    with pytest.raises(ValueError, match=r'runs of reference are priced at .* \(3 runs\);'):
        summarize(mixed)

    # An explicit --prices prices every run alike, and the header says so.
    assert cli.main(['summarize', str(path), '--prices', '2,0.1,2.5,10']) == 0
    output = capsys.readouterr().out
    assert f'included) at the given --prices ({REFERENCE_SHEET})' in header(output)
    assert cost_cells(output) == at_reference


def test_the_header_names_the_recorded_prices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.report import read_records, write_records

    assert cli.main([*BENCH, '--seeds', '101', '--prices', OTHER, '--out', str(tmp_path)]) == 0
    at_other = capsys.readouterr().out
    assert cli.main(['summarize', str(tmp_path / 'incident.jsonl')]) == 0
    output = capsys.readouterr().out
    assert f'included) at the prices recorded with the runs ({OTHER_SHEET})' in header(output)
    assert cost_cells(output) == cost_cells(at_other)

    # Records from before prices were recorded are priced by their model, and the header says so.
    records = read_records(tmp_path / 'incident.jsonl')
    old = tmp_path / 'old.jsonl'
    write_records([{k: v for k, v in r.items() if k != 'prices'} for r in records], old)
    assert cli.main(['summarize', str(old)]) == 0
    assert f"included) at the model's rates as known now ({REFERENCE_SHEET})" in header(capsys.readouterr().out)

    # A run recorded without prices joins runs recorded at the model's own: one sheet, no refusal.
    reference = {'input': 2.0, 'cache_read': 0.1, 'cache_write': 2.5, 'output': 10.0}
    partly = tmp_path / 'partly.jsonl'
    write_records([records[0] | {'prices': reference}, {k: v for k, v in records[1].items() if k != 'prices'}], partly)
    assert cli.main(['summarize', str(partly)]) == 0
    assert f'recorded without) ({REFERENCE_SHEET})' in header(capsys.readouterr().out)


def test_runs_of_other_models_may_be_priced_otherwise(tmp_path: Path) -> None:
    from pydantic_ai_compaction_bench.cli import resumed_at_other_prices
    from pydantic_ai_compaction_bench.report import mixed_prices, price_sheets

    def run(model: str, prices: dict[str, float] | None, status: str = 'ok') -> dict[str, object]:
        return {'model': model, 'prices': prices, 'status': status}

    free = {'input': 0.0, 'cache_read': 0.0, 'cache_write': 0.0, 'output': 0.0}
    dear = {'input': 100.0, 'cache_read': 10.0, 'cache_write': 100.0, 'output': 400.0}
    kept = [run('reference', None), run('openai-chat:stub', free), run('openai-chat:stub', dear, status='missing')]
    # Each model has its own tables; a missing run is in none of them (a rerun replaces it).
    assert mixed_prices(kept) == ''
    assert {model: sum(counts.values()) for model, counts in price_sheets(kept).items()} == {
        'reference': 1,
        'openai-chat:stub': 1,
    }
    path = tmp_path / 'incident.jsonl'
    assert resumed_at_other_prices(kept, 'openai-chat:stub', free, path) == ''
    assert resumed_at_other_prices(kept, 'openai:new', dear, path) == ''
    refused = resumed_at_other_prices(kept, 'openai-chat:stub', dear, path)
    assert refused.startswith(f'{path} holds runs of openai-chat:stub priced at $0 input, $0 cache read')
    assert 'pass --prices 0,0,0,0 to add runs at them' in refused
    # The file's runs of the model already at two sheets: no --prices matches them all.
    twice = [*kept, run('openai-chat:stub', dear)]
    refused = resumed_at_other_prices(twice, 'openai-chat:stub', free, path)
    assert refused.endswith(
        f'priced at $0 input, $0 cache read, $0 cache write, $0 output per million tokens (1 run); {OTHER_SHEET} '
        f'(1 run); this run would price its runs at $0 input, $0 cache read, $0 cache write, $0 output per million '
        'tokens: write to another --out (or --overwrite)'
    )
    assert mixed_prices(twice).startswith('runs of openai-chat:stub are priced at $0 input')


@pytest.mark.parametrize('sheet', ['1.1234567,0.11234567,1.404320875,5.6172835', '2,0.1,2.5,10', '3e-07,1,2,4'])
def test_the_suggested_prices_read_back_as_the_recorded_ones(sheet: str) -> None:
    """A refused resume suggests `--prices` written from the recorded sheet: written with six digits (`:g`), the
    suggestion of a sheet like 1.1234567 was itself refused, and the error showed the same figures on both sides."""
    from pydantic_ai_compaction_bench.cli import price_table
    from pydantic_ai_compaction_bench.report import describe_prices, prices_argument

    recorded = price_table(sheet)
    assert price_table(prices_argument(recorded)) == recorded
    assert describe_prices(recorded) != describe_prices(price_table('1.12346,0.112346,1.40432,5.61728'))
